"""Hierarchical deterministic ed25519 keys: BIP39 mnemonics and SLIP-0010 derivation.

A 24-word BIP39 mnemonic (plus an optional BIP39 passphrase) gives a 64-byte seed; SLIP-0010 derives ed25519
keys from it along hardened paths only (ed25519 has no public derivation). Trolly's path is

    m/44'/7777'/0'/0'/<index>'

(purpose 44, coin type 7777, account 0, change 0, address index). 7777 is Trolly's own choice, not a
registered SLIP-44 coin type; it keeps keys for this chain apart from keys for other chains on the same mnemonic.
"""

from __future__ import annotations

import hashlib
import hmac

from mnemonic import Mnemonic

from .crypto import PrivateKey

HARDENED = 0x80000000
COIN_TYPE = 7777
DEFAULT_PATH = f"m/44'/{COIN_TYPE}'/0'/0'/0'"

DEV_MNEMONIC = " ".join(["abandon"] * 23 + ["art"])
"""The publicly known BIP39 test mnemonic: funds the `trolly-node dev` and localnet accounts. Never use it
for anything of value."""

_WORDLIST = Mnemonic("english")


def generate_mnemonic(strength_bits: int = 256) -> str:
    """A fresh mnemonic from the OS's secure random source (24 words at 256 bits)."""
    return _WORDLIST.generate(strength=strength_bits)


def is_valid_mnemonic(phrase: str) -> bool:
    return _WORDLIST.check(normalize_mnemonic(phrase))


def normalize_mnemonic(phrase: str) -> str:
    return " ".join(phrase.strip().lower().split())


def mnemonic_to_seed(phrase: str, passphrase: str = "") -> bytes:
    phrase = normalize_mnemonic(phrase)
    if not _WORDLIST.check(phrase):
        raise ValueError("invalid mnemonic: unknown word or bad checksum")
    return Mnemonic.to_seed(phrase, passphrase)


def parse_path(path: str) -> list[int]:
    parts = path.split("/")
    if parts[0] != "m":
        raise ValueError(f"derivation path must start with 'm/': {path!r}")
    indices = []
    for part in parts[1:]:
        if not part.endswith("'") or not part[:-1].isdigit():
            raise ValueError(f"ed25519 paths are hardened only (e.g. 44'); got {part!r} in {path!r}")
        index = int(part[:-1])
        if index >= HARDENED:
            raise ValueError(f"path index too large: {part!r}")
        indices.append(index + HARDENED)
    return indices


def derive_seed(seed: bytes, path: str = DEFAULT_PATH) -> bytes:
    """SLIP-0010 ed25519 private key (32 bytes) at `path`."""
    digest = hmac.new(b"ed25519 seed", seed, hashlib.sha512).digest()
    key, chain_code = digest[:32], digest[32:]
    for index in parse_path(path):
        data = b"\x00" + key + index.to_bytes(4, "big")
        digest = hmac.new(chain_code, data, hashlib.sha512).digest()
        key, chain_code = digest[:32], digest[32:]
    return key


def key_from_mnemonic(phrase: str, path: str = DEFAULT_PATH, passphrase: str = "") -> PrivateKey:
    return PrivateKey(derive_seed(mnemonic_to_seed(phrase, passphrase), path))


def dev_key(index: int = 0) -> PrivateKey:
    """The well-known dev/localnet key number `index` (insecure by design)."""
    return key_from_mnemonic(DEV_MNEMONIC, f"m/44'/{COIN_TYPE}'/0'/0'/{index}'")
