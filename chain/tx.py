"""Transaction encoding, decoding, signing and hashing.

Wire form: the protobuf `Tx {body_bytes, pubkey, signature}` of `proto/tx.proto`. The signature covers
`SIGN_DOMAIN + body_bytes` exactly as received, and the body names the chain id, so a signature is valid
for one chain and for transactions only. The hash of a transaction is sha256 of its raw bytes, as in
CometBFT (shown as upper-case hex).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Iterator

from google.protobuf.message import DecodeError, Message

from .crypto import PrivateKey, address_from_pubkey, encode_address
from .errors import TxDecodeError, TxTooLarge
from .proto import tx_pb2

SIGN_DOMAIN = b"trolly/tx/v1\x00"
"""Prefix of every signed byte string, so a tx signature can never be replayed as another kind of signature."""

MAX_TX_BYTES = 1 << 20
"""Hard upper bound on a transaction's encoded size (the params may set a lower one)."""


@dataclass(frozen=True)
class SignedTx:
    """A decoded transaction: the raw bytes, the parsed body and the signer."""

    raw: bytes
    body: tx_pb2.TxBody
    body_bytes: bytes
    pubkey: bytes
    signature: bytes

    @functools.cached_property
    def signer(self) -> bytes:
        return address_from_pubkey(self.pubkey)

    @functools.cached_property
    def sender(self) -> str:
        """The signer's address as text (`trolly1...`), as the tx's events carry it."""
        return encode_address(self.signer)

    @property
    def hash(self) -> bytes:
        return tx_hash(self.raw)


def tx_hash(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


def sign_bytes(body_bytes: bytes) -> bytes:
    return SIGN_DOMAIN + body_bytes


def decode_tx(raw: bytes, max_bytes: int = MAX_TX_BYTES) -> SignedTx:
    """Parse a transaction envelope and its body; raises TxDecodeError/TxTooLarge, never anything else."""
    if len(raw) > max_bytes:
        raise TxTooLarge(f"tx is {len(raw)} bytes, limit {max_bytes}")
    if not raw:
        raise TxDecodeError("empty tx")
    try:
        envelope = tx_pb2.Tx.FromString(raw)
        body = tx_pb2.TxBody.FromString(envelope.body_bytes)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise TxDecodeError(f"tx decode failed: {exc}") from None
    if not envelope.body_bytes:
        raise TxDecodeError("tx has no body")
    # Only the canonical encoding is accepted: protobuf would otherwise silently truncate an over-long varint
    # (an amount beyond 64 bits) or keep unknown fields, and two readers could disagree on what was signed.
    if not is_canonical(envelope, raw) or not is_canonical(body, envelope.body_bytes):
        raise TxDecodeError("tx is not canonically encoded (unknown fields, over-long varints or integers beyond 64 bits)")
    return SignedTx(raw, body, envelope.body_bytes, envelope.pubkey, envelope.signature)


def signed_payloads(txs: list[bytes], max_bytes: int = MAX_TX_BYTES) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(pubkey, signed bytes, signature) of each transaction that parses, in block order: what
    `check_tx_stateless` will verify, for checking ahead. Transactions that do not parse are skipped (they fail
    before their signature is looked at)."""
    for raw in txs:
        if not raw or len(raw) > max_bytes:
            continue
        try:
            envelope = tx_pb2.Tx.FromString(raw)
        except (DecodeError, ValueError, RuntimeError):
            continue
        yield envelope.pubkey, sign_bytes(envelope.body_bytes), envelope.signature


def is_canonical(message: Message, raw: bytes) -> bool:
    """True when `raw` is exactly the deterministic encoding of `message` (which was parsed from it) without
    unknown fields. Drops `message`'s unknown fields as a side effect."""
    message.DiscardUnknownFields()
    return message.SerializeToString(deterministic=True) == raw


def type_url_of(message: Message) -> str:
    return "/" + message.DESCRIPTOR.full_name


def build_tx(key: PrivateKey, chain_id: str, nonce: int, fee: int, messages: list[Message], memo: str = "") -> bytes:
    """Encode and sign a transaction carrying `messages` (protobuf message objects)."""
    body = tx_pb2.TxBody(chain_id=chain_id, nonce=nonce, fee=fee, memo=memo)
    for message in messages:
        body.messages.add(type_url=type_url_of(message), value=message.SerializeToString(deterministic=True))
    body_bytes = body.SerializeToString(deterministic=True)
    envelope = tx_pb2.Tx(body_bytes=body_bytes, pubkey=key.pubkey, signature=key.sign(sign_bytes(body_bytes)))
    return envelope.SerializeToString(deterministic=True)
