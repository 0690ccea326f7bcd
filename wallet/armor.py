"""Password-encrypted, text-armored private keys, for moving a key between keyrings (`keys export`/`import`).

    -----BEGIN TROLLY PRIVATE KEY-----
    kdf: argon2id
    opslimit: 3
    memlimit: 268435456
    salt: <base64>
    type: ed25519
    address: trolly1...

    <base64 of SecretBox(seed), 64 characters a line>
    -----END TROLLY PRIVATE KEY-----

The armor password is separate from the keyring password, so a key can be handed to someone else's keyring.
The headers are not secret; the address header is checked against the decrypted seed on import, so an armor
whose header was edited is refused.
"""

from __future__ import annotations

import base64
import textwrap

import nacl.exceptions
import nacl.pwhash.argon2id as argon2id
import nacl.secret
import nacl.utils

from trolly.chain.crypto import PrivateKey, encode_address

from .errors import KeyringError, WrongPassword
from .keyring import KdfParams, MIN_PASSWORD_LENGTH, check_kdf_params, derive_encryption_key

BEGIN = "-----BEGIN TROLLY PRIVATE KEY-----"
END = "-----END TROLLY PRIVATE KEY-----"


def encrypt_armor(key: PrivateKey, password: str, params: KdfParams = KdfParams(), *,
                  weak_kdf_for_tests: bool = False) -> str:
    """The armored, password-encrypted key (argon2id at `params`, MODERATE by default; see `keyring`)."""
    check_kdf_params(params, "the armor's parameters", weak_for_tests=weak_kdf_for_tests)
    if len(password) < MIN_PASSWORD_LENGTH:
        raise KeyringError(f"the export password must be at least {MIN_PASSWORD_LENGTH} characters")
    salt = nacl.utils.random(argon2id.SALTBYTES)
    box = nacl.secret.SecretBox(derive_encryption_key(password, salt, params))
    headers = {
        "kdf": "argon2id",
        "opslimit": str(params.opslimit),
        "memlimit": str(params.memlimit),
        "salt": base64.b64encode(salt).decode(),
        "type": "ed25519",
        "address": encode_address(key.address),
    }
    body = "\n".join(textwrap.wrap(base64.b64encode(box.encrypt(key.seed)).decode(), 64))
    header_text = "\n".join(f"{name}: {value}" for name, value in headers.items())
    return f"{BEGIN}\n{header_text}\n\n{body}\n{END}\n"


def decrypt_armor(text: str, password: str, *, weak_kdf_for_tests: bool = False) -> PrivateKey:
    """The key inside an armor; its KDF parameters are bounded (`keyring.check_kdf_params`) before any hashing."""
    headers, ciphertext = _parse(text)
    if headers.get("kdf") != "argon2id" or headers.get("type") != "ed25519":
        raise KeyringError("unsupported armor: expected kdf argon2id and type ed25519")
    try:
        params = KdfParams(_decimal(headers["opslimit"]), _decimal(headers["memlimit"]))
        salt = base64.b64decode(headers["salt"], validate=True)
    except (KeyError, ValueError) as exc:
        raise KeyringError(f"malformed armor header: {exc}") from None
    check_kdf_params(params, "armor header", weak_for_tests=weak_kdf_for_tests)
    box = nacl.secret.SecretBox(derive_encryption_key(password, salt, params))
    try:
        seed = box.decrypt(ciphertext)
    except nacl.exceptions.CryptoError:
        raise WrongPassword("wrong password for this armored key (or the armor was altered)") from None
    key = PrivateKey(seed)
    if headers.get("address") != encode_address(key.address):
        raise KeyringError("armor header address does not match the key inside it")
    return key


def _parse(text: str) -> tuple[dict[str, str], bytes]:
    lines = [line.strip() for line in text.strip().splitlines()]
    if not lines or lines[0] != BEGIN or lines[-1] != END:
        raise KeyringError(f"not an armored Trolly key: expected {BEGIN} ... {END}")
    inner = lines[1:-1]
    if "" not in inner:
        raise KeyringError("malformed armor: no blank line between headers and body")
    split = inner.index("")
    headers = {}
    for line in inner[:split]:
        name, separator, value = line.partition(":")
        if not separator:
            raise KeyringError(f"malformed armor header line {line!r}")
        headers[name.strip()] = value.strip()
    try:
        ciphertext = base64.b64decode("".join(inner[split + 1 :]), validate=True)
    except ValueError:
        raise KeyringError("malformed armor body: not base64") from None
    return headers, ciphertext


def _decimal(text: str) -> int:
    """A header's number: up to 20 decimal digits (int() alone would accept signs, spaces, underscores, and
    digit strings long enough to take the interpreter's conversion limit)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise ValueError(f"expected a decimal number, got {text[:40]!r}")
    return int(text)
