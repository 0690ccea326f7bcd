"""Named ed25519 keys on disk: the keyring.

Two backends, chosen per command (`--keyring-backend`):

- `file` (default): every key's seed is encrypted with XSalsa20-Poly1305 (`nacl.secret.SecretBox`) under a
  32-byte key derived from the keyring password by argon2id (`nacl.pwhash.argon2id`, libsodium's MODERATE
  level for a new keyring), with a random salt and the cost parameters stored in `keyring.json`. Parameters
  read from the file are bounded before use (INTERACTIVE, the former default, up to SENSITIVE), so a damaged
  or hostile file cannot make a command allocate gigabytes or hash for hours. The password is checked
  against an encrypted marker there, so a wrong password fails before anything is read or written. The
  password-derived key is computed once per keyring object, so a command asks for the password at most once
  and pays the argon2id cost once.
- `test`: seeds stored unencrypted, each file labelled as such: for localnets and tests only.

Layout under the wallet home (directories 0700, files 0600):

    keyring-file/keyring.json          kdf parameters, salt, password check (no secret)
    keyring-file/<name>.key.json       name, address, public key, path, encrypted seed
    keyring-test/<name>.key.json       name, address, public key, path, seed (UNENCRYPTED)

Public information (name, address, public key) stays readable without the password, so `keys list` and
`keys show` never ask for it. The mnemonic is never stored: it is shown once when the key is created.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import time
from dataclasses import dataclass

import nacl.exceptions
import nacl.pwhash.argon2id as argon2id
import nacl.secret
import nacl.utils

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.hd import DEFAULT_PATH, derive_seed, generate_mnemonic, is_valid_mnemonic, mnemonic_to_seed

from .errors import KeyExists, KeyNotFound, KeyringError, WrongPassword
from .files import ensure_private_directory, write_private_file
from .passwords import PasswordSource

BACKENDS = ("file", "test")
MIN_PASSWORD_LENGTH = 8
KEY_FILE_SUFFIX = ".key.json"
_PASSWORD_CHECK = b"trolly keyring password check v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TEST_BACKEND_WARNING = "UNENCRYPTED TEST KEY: anyone who can read this file controls the account"


@dataclass(frozen=True)
class KdfParams:
    """argon2id cost. The default for every new keyring and armored key is libsodium's MODERATE level
    (3 passes over 256 MiB): a guess of the password costs an attacker that much memory and time."""

    opslimit: int = argon2id.OPSLIMIT_MODERATE
    memlimit: int = argon2id.MEMLIMIT_MODERATE


WEAKEST_ACCEPTED = KdfParams(argon2id.OPSLIMIT_INTERACTIVE, argon2id.MEMLIMIT_INTERACTIVE)
"""The weakest parameters a key file may name: libsodium's INTERACTIVE level (2 passes, 64 MiB), what keyrings
and armors were written with before MODERATE became the default, so that they still open."""
STRONGEST_ACCEPTED = KdfParams(argon2id.OPSLIMIT_SENSITIVE, argon2id.MEMLIMIT_SENSITIVE)
"""The costliest parameters a key file may name: libsodium's SENSITIVE level (4 passes, 1 GiB). A file asking
for more (64 GiB of memory, a billion passes) is damaged or hostile: it would stall or kill the command."""


def check_kdf_params(params: KdfParams, source: str, *, weak_for_tests: bool = False) -> KdfParams:
    """`params` if they are whole numbers between WEAKEST_ACCEPTED and STRONGEST_ACCEPTED, else KeyringError;
    checked before anything is hashed or a password asked for. `weak_for_tests` lifts the lower bound only
    (libsodium's own minimum still holds) so that tests stay fast: never set outside tests."""
    for name in ("opslimit", "memlimit"):
        value = getattr(params, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise KeyringError(f"{source}: argon2id {name} must be an integer, got {value!r}")
        weakest = getattr(KdfParams(argon2id.OPSLIMIT_MIN, argon2id.MEMLIMIT_MIN) if weak_for_tests
                          else WEAKEST_ACCEPTED, name)
        strongest = getattr(STRONGEST_ACCEPTED, name)
        if value > strongest:
            raise KeyringError(f"{source}: argon2id {name} {value} is more than the {strongest} this wallet accepts "
                               f"(libsodium's SENSITIVE level); the file is damaged or was not written by Trolly")
        if value < weakest:
            raise KeyringError(f"{source}: argon2id {name} {value} is weaker than the {weakest} this wallet accepts; "
                               f"the file was not written by Trolly: recover the keys from their mnemonics "
                               f"(`keys add --recover`) into a new keyring")
    return params


def derive_encryption_key(password: str, salt: bytes, params: KdfParams) -> bytes:
    if len(salt) != argon2id.SALTBYTES:
        raise KeyringError(f"the argon2id salt must be {argon2id.SALTBYTES} bytes, got {len(salt)}")
    return argon2id.kdf(
        nacl.secret.SecretBox.KEY_SIZE, password.encode("utf-8"), salt, opslimit=params.opslimit, memlimit=params.memlimit
    )


@dataclass(frozen=True)
class KeyInfo:
    """What anyone may see about a key: no secret here."""

    name: str
    address: str
    pubkey: bytes
    path: str
    backend: str
    created: int

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "address": self.address,
            "pubkey": base64.b64encode(self.pubkey).decode(),
            "path": self.path,
            "backend": self.backend,
        }


def validate_key_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise KeyringError(
            f"invalid key name {name!r}: 1-64 characters, letters, digits, '.', '_' or '-', not starting with '.'"
        )
    return name


class Keyring:
    """The keys of one backend in one wallet home."""

    def __init__(
        self,
        home: str | pathlib.Path,
        backend: str = "file",
        passwords: PasswordSource | None = None,
        kdf: KdfParams = KdfParams(),
        *,
        weak_kdf_for_tests: bool = False,
    ) -> None:
        """`kdf`: the argon2id cost of a new keyring (bounded like a file's). `weak_kdf_for_tests` lets a test
        create and open keyrings weaker than WEAKEST_ACCEPTED, so that it runs fast; never set it elsewhere."""
        if backend not in BACKENDS:
            raise KeyringError(f"unknown keyring backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        self._weak_for_tests = weak_kdf_for_tests
        check_kdf_params(kdf, "the new keyring's parameters", weak_for_tests=weak_kdf_for_tests)
        self.home = pathlib.Path(home).expanduser()
        self.backend = backend
        self.directory = self.home / f"keyring-{backend}"
        self._passwords = passwords or PasswordSource()
        self._kdf = kdf
        self._box: nacl.secret.SecretBox | None = None

    # ---- public information -------------------------------------------------------------------------------

    def list(self) -> list[KeyInfo]:
        if not self.directory.is_dir():
            return []
        return sorted(
            (self._read_info(path) for path in self.directory.glob("*" + KEY_FILE_SUFFIX)), key=lambda k: k.name
        )

    def get(self, name: str) -> KeyInfo:
        return self._read_info(self._key_path(name))

    def exists(self, name: str) -> bool:
        return self._key_path(name).exists()

    def find_by_address(self, address: str) -> KeyInfo | None:
        return next((info for info in self.list() if info.address == address), None)

    # ---- adding keys --------------------------------------------------------------------------------------

    def create(self, name: str, path: str = DEFAULT_PATH) -> tuple[KeyInfo, str]:
        """A new key from a fresh 24-word mnemonic; returns the key and the mnemonic (to show once)."""
        self._refuse_existing(name)
        mnemonic = generate_mnemonic(256)
        return self.recover(name, mnemonic, path), mnemonic

    def recover(self, name: str, mnemonic: str, path: str = DEFAULT_PATH, bip39_passphrase: str = "") -> KeyInfo:
        self._refuse_existing(name)
        if not is_valid_mnemonic(mnemonic):
            raise KeyringError("invalid mnemonic: unknown word or bad checksum")
        try:
            seed = derive_seed(mnemonic_to_seed(mnemonic, bip39_passphrase), path)
        except ValueError as exc:
            raise KeyringError(str(exc)) from None
        return self.add_seed(name, seed, path)

    def add_seed(self, name: str, seed: bytes, path: str = "") -> KeyInfo:
        """Store a 32-byte ed25519 seed under `name` (the path is recorded for information only)."""
        self._refuse_existing(name)
        key = PrivateKey(seed)
        info = KeyInfo(name, encode_address(key.address), key.pubkey, path, self.backend, int(time.time()))
        record = {
            "version": 1,
            "name": name,
            "address": info.address,
            "pubkey": base64.b64encode(key.pubkey).decode(),
            "path": path,
            "created": info.created,
        }
        if self.backend == "test":
            record["WARNING"] = TEST_BACKEND_WARNING
            record["seed"] = seed.hex()
        else:
            box = self._unlock(creating=True)
            record["encrypted_seed"] = base64.b64encode(box.encrypt(seed)).decode()
        ensure_private_directory(self.home)
        write_private_file(self._key_path(name), _dump(record), exclusive=True)
        return info

    def initialize(self) -> None:
        """Create the file keyring (asking for its new password) if it does not exist yet, else check the
        password; adding the first key does this by itself. Nothing to do for the test backend."""
        if self.backend == "file":
            self._unlock(creating=True)

    # ---- using and removing keys --------------------------------------------------------------------------

    def signer(self, name: str) -> PrivateKey:
        """The private key named `name` (asks for the password with the file backend)."""
        path = self._key_path(name)
        record = self._load(path, name)
        if self.backend == "test":
            seed = bytes.fromhex(record["seed"])
        else:
            box = self._unlock(creating=False)
            try:
                seed = box.decrypt(base64.b64decode(record["encrypted_seed"]))
            except nacl.exceptions.CryptoError:
                raise WrongPassword(f"key {name!r} does not decrypt with this keyring's password") from None
        key = PrivateKey(seed)
        if encode_address(key.address) != record["address"]:
            raise KeyringError(f"key file {path} is corrupt: its seed does not match its address")
        return key

    def delete(self, name: str) -> KeyInfo:
        info = self.get(name)
        self._key_path(name).unlink()
        return info

    # ---- internals ----------------------------------------------------------------------------------------

    def _key_path(self, name: str) -> pathlib.Path:
        return self.directory / (validate_key_name(name) + KEY_FILE_SUFFIX)

    def _refuse_existing(self, name: str) -> None:
        if self._key_path(name).exists():
            raise KeyExists(f"a key named {name!r} already exists in the {self.backend} keyring")

    def _load(self, path: pathlib.Path, name: str) -> dict:
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            raise KeyNotFound(name, self.backend) from None
        except (OSError, ValueError) as exc:
            raise KeyringError(f"cannot read key file {path}: {exc}") from None

    def _read_info(self, path: pathlib.Path) -> KeyInfo:
        name = path.name[: -len(KEY_FILE_SUFFIX)]
        record = self._load(path, name)
        try:
            return KeyInfo(
                record["name"],
                record["address"],
                base64.b64decode(record["pubkey"]),
                record.get("path", ""),
                self.backend,
                int(record.get("created", 0)),
            )
        except (KeyError, ValueError) as exc:
            raise KeyringError(f"key file {path} is malformed: missing {exc}") from None

    def _unlock(self, *, creating: bool) -> nacl.secret.SecretBox:
        """The SecretBox for this keyring, deriving it from the password once; creates the keyring if asked."""
        if self._box is not None:
            return self._box
        meta_path = self.directory / "keyring.json"
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_bytes())
                check = base64.b64decode(meta["check"], validate=True)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise KeyringError(f"cannot read {meta_path}: {type(exc).__name__}: {exc}") from None
            params, salt = self._read_kdf(meta_path, meta)
            password = self._passwords.get(f"Password for the keyring in {self.home}")
            box = nacl.secret.SecretBox(derive_encryption_key(password, salt, params))
            try:
                box.decrypt(check)
            except nacl.exceptions.CryptoError:
                raise WrongPassword("wrong keyring password") from None
        elif creating:
            password = self._passwords.get(f"New password for the keyring in {self.home}", confirm=True)
            if len(password) < MIN_PASSWORD_LENGTH:
                raise KeyringError(f"the keyring password must be at least {MIN_PASSWORD_LENGTH} characters")
            salt = nacl.utils.random(argon2id.SALTBYTES)
            box = nacl.secret.SecretBox(derive_encryption_key(password, salt, self._kdf))
            meta = {
                "version": 1,
                "kdf": {
                    "algorithm": "argon2id",
                    "opslimit": self._kdf.opslimit,
                    "memlimit": self._kdf.memlimit,
                    "salt": base64.b64encode(salt).decode(),
                },
                "cipher": "xsalsa20-poly1305",
                "check": base64.b64encode(box.encrypt(_PASSWORD_CHECK)).decode(),
            }
            ensure_private_directory(self.home)
            ensure_private_directory(self.directory)
            write_private_file(meta_path, _dump(meta))
        else:
            raise KeyringError(f"the file keyring in {self.home} is empty: add a key first")
        self._box = box
        return box

    def _read_kdf(self, path: pathlib.Path, meta: object) -> tuple[KdfParams, bytes]:
        """The KDF parameters and salt of `keyring.json`, bounded (`check_kdf_params`) before any use."""
        kdf = meta.get("kdf") if isinstance(meta, dict) else None
        if not isinstance(kdf, dict) or kdf.get("algorithm", "argon2id") != "argon2id":
            raise KeyringError(f"{path} is malformed: expected an argon2id \"kdf\" section")
        params = check_kdf_params(KdfParams(kdf.get("opslimit"), kdf.get("memlimit")), str(path),
                                  weak_for_tests=self._weak_for_tests)
        try:
            salt = base64.b64decode(kdf.get("salt", ""), validate=True)
        except (TypeError, ValueError):
            raise KeyringError(f"{path} is malformed: the salt is not base64") from None
        if len(salt) != argon2id.SALTBYTES:
            raise KeyringError(f"{path} is malformed: the salt must be {argon2id.SALTBYTES} bytes")
        return params, salt


def _dump(record: dict) -> bytes:
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
