"""Keys, signatures and addresses.

Accounts use ed25519 (PyNaCl). An address is the first 20 bytes of sha256(public key), the same rule
CometBFT uses for validator addresses, shown to people as bech32 with the human-readable prefix `trolly`.
"""

import hashlib

import bech32
import nacl.exceptions
import nacl.signing

from .bech32_fast import bech32_encode_bytes
from .errors import InvalidAddress

ADDRESS_PREFIX = "trolly"
"""Human-readable part of every bech32 account address."""

ADDRESS_LENGTH = 20
PUBKEY_LENGTH = 32
SIGNATURE_LENGTH = 64


def address_from_pubkey(pubkey: bytes) -> bytes:
    """The 20-byte address of an ed25519 public key."""
    return hashlib.sha256(pubkey).digest()[:ADDRESS_LENGTH]


def encode_address(address: bytes) -> str:
    """Bech32 text form (`trolly1...`) of a 20-byte address (the table-driven fast path of the reference)."""
    if len(address) != ADDRESS_LENGTH:
        raise InvalidAddress(f"address must be {ADDRESS_LENGTH} bytes, got {len(address)}")
    return bech32_encode_bytes(ADDRESS_PREFIX, bytes(address))


def encode_address_reference(address: bytes) -> str:
    """The readable `encode_address` with the `bech32` package; tests hold the fast path to it."""
    if len(address) != ADDRESS_LENGTH:
        raise InvalidAddress(f"address must be {ADDRESS_LENGTH} bytes, got {len(address)}")
    return bech32.bech32_encode(ADDRESS_PREFIX, bech32.convertbits(address, 8, 5))


def decode_address(text: str) -> bytes:
    """The 20 bytes behind a `trolly1...` address; raises InvalidAddress on any defect."""
    if not isinstance(text, str) or text.lower() != text and text.upper() != text:
        raise InvalidAddress(f"invalid address {text!r}: mixed case")
    hrp, data = bech32.bech32_decode(text)
    if hrp is None or data is None:
        raise InvalidAddress(f"invalid address {text!r}: bad bech32 checksum or characters")
    if hrp != ADDRESS_PREFIX:
        raise InvalidAddress(f"invalid address {text!r}: prefix must be {ADDRESS_PREFIX!r}, got {hrp!r}")
    raw = bech32.convertbits(data, 5, 8, False)
    if raw is None or len(raw) != ADDRESS_LENGTH:
        raise InvalidAddress(f"invalid address {text!r}: must encode {ADDRESS_LENGTH} bytes")
    return bytes(raw)


MODULE_ACCOUNTS = ("fee_collector", "bonded_pool", "unbonding_pool", "market_escrow", "gov_deposits", "distribution")
"""Every module account, by name: the fee collector (ante.py), the staking pools (validators.py), the
market's escrow (market/store.py), the proposals' deposits (gov/store.py) and the delegators' rewards not yet
withdrawn (rewards.py). Listed here, not collected as modules are imported, so that which addresses users cannot
send to never depends on what happened to be imported first."""


def _derive_module_address(name: str) -> bytes:
    return hashlib.sha256(b"trolly/module/" + name.encode()).digest()[:ADDRESS_LENGTH]


MODULE_ADDRESSES = frozenset(_derive_module_address(name) for name in MODULE_ACCOUNTS)


def module_address(name: str) -> bytes:
    """Address of a module account (escrow, fee collector, bonded pool); no key can sign for it, and users
    cannot send to it directly (tokens sent there would break the module's bookkeeping). A name missing from
    MODULE_ACCOUNTS is refused, so that every module account is protected."""
    if name not in MODULE_ACCOUNTS:
        raise ValueError(f"{name!r} is not a module account; add it to chain.crypto.MODULE_ACCOUNTS")
    return _derive_module_address(name)


def is_module_address(address: bytes) -> bool:
    return address in MODULE_ADDRESSES


def verify_signature(pubkey: bytes, message: bytes, signature: bytes) -> bool:
    """True when `signature` is a valid ed25519 signature of `message` by `pubkey` (checked with PyNaCl).

    A pure function: nothing is remembered here. A node that checks the same transaction several times
    (CheckTx, the re-check, the proposal steps, FinalizeBlock) remembers its passed checks in a
    `checked_txs.CheckedTxs` it builds and hands to `chain.app`."""
    if len(pubkey) != PUBKEY_LENGTH or len(signature) != SIGNATURE_LENGTH:
        return False
    try:
        nacl.signing.VerifyKey(pubkey).verify(message, signature)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        return False
    return True


class PrivateKey:
    """An ed25519 signing key built from its 32-byte seed (used by wallets, tests and the solo engine)."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("an ed25519 seed is 32 bytes")
        self._key = nacl.signing.SigningKey(seed)

    @property
    def seed(self) -> bytes:
        return bytes(self._key)

    @property
    def pubkey(self) -> bytes:
        return bytes(self._key.verify_key)

    @property
    def address(self) -> bytes:
        return address_from_pubkey(self.pubkey)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message).signature
