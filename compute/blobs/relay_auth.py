"""How a worker signs what it pushes to a blob relay, and how the relay checks it (docs/protocol.md 3a).

A push carries four headers:

    Trolly-Task:        the task id the blob belongs to (decimal)
    Trolly-Public-Key:  the worker's ed25519 public key (64 hex digits); its address must be the worker's
    Trolly-Time:        the signing time, whole Unix seconds (decimal)
    Trolly-Signature:   ed25519 over `push_message(...)` (128 hex digits)

The signed message names the worker, the task, what is pushed (`blob`, or `checkpoints/<round>` for a round's
listing), the sha256 of the content (the blob's name, or of the listing's body) and the time, one per line
after a domain line, so a signature is good for that content, in that task, by that worker, and nothing else.
The relay accepts a signature only within `max_skew` seconds of its own clock: an old push cannot be played
again once the worker has left the task (a replay inside the window stores the same bytes again, harmless).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from trolly.chain.crypto import PrivateKey, address_from_pubkey, encode_address, verify_signature

from .errors import BlobRejected

PUSH_DOMAIN = "trolly-relay-push/v1"
TASK_HEADER = "Trolly-Task"
PUBLIC_KEY_HEADER = "Trolly-Public-Key"
TIME_HEADER = "Trolly-Time"
SIGNATURE_HEADER = "Trolly-Signature"
DEFAULT_MAX_SKEW = 300
"""Seconds a push's signing time may lie before or after the relay's clock."""


class PushUnsigned(BlobRejected):
    """A push without valid signature headers (HTTP 401)."""


class PushSignatureInvalid(BlobRejected):
    """A push whose signature is not the worker's over this content and time, or whose time is outside the
    relay's window (HTTP 401)."""


def push_message(worker: str, task_id: int, resource: str, content_hash: str, timestamp: int) -> bytes:
    """The bytes a push's signature covers."""
    return "\n".join([PUSH_DOMAIN, worker, str(task_id), resource, content_hash, str(timestamp)]).encode()


def sign_push(key: PrivateKey, task_id: int, resource: str, content_hash: str, timestamp: int) -> dict[str, str]:
    """The headers of a push of `resource` (content `content_hash`) to task `task_id`, signed by `key`."""
    worker = encode_address(key.address)
    signature = key.sign(push_message(worker, task_id, resource, content_hash, timestamp))
    return {TASK_HEADER: str(task_id), PUBLIC_KEY_HEADER: key.pubkey.hex(), TIME_HEADER: str(timestamp),
            SIGNATURE_HEADER: signature.hex()}


@dataclasses.dataclass(frozen=True)
class PushSignature:
    """A push's signature headers, read."""

    task_id: int
    public_key: bytes
    timestamp: int
    signature: bytes

    @property
    def worker(self) -> str:
        return encode_address(address_from_pubkey(self.public_key))


def read_push_headers(headers: Mapping[str, str]) -> PushSignature:
    """The signature headers of a push; `PushUnsigned` when one is missing or malformed."""
    missing = [name for name in (TASK_HEADER, PUBLIC_KEY_HEADER, TIME_HEADER, SIGNATURE_HEADER) if name not in headers]
    if missing:
        raise PushUnsigned(f"unsigned push: missing {', '.join(missing)} (pushes are signed by a member of the "
                           f"task: docs/protocol.md 3a)")
    try:
        task_id, timestamp = _decimal(headers[TASK_HEADER]), _decimal(headers[TIME_HEADER])
        public_key, signature = bytes.fromhex(headers[PUBLIC_KEY_HEADER]), bytes.fromhex(headers[SIGNATURE_HEADER])
    except ValueError as error:
        raise PushUnsigned(f"malformed signature headers: {error}") from None
    if len(public_key) != 32 or len(signature) != 64:
        raise PushUnsigned("malformed signature headers: the public key is 32 bytes, the signature 64 (hex)")
    return PushSignature(task_id, public_key, timestamp, signature)


def check_push(signed: PushSignature, worker: str, resource: str, content_hash: str, now: float,
               max_skew: int = DEFAULT_MAX_SKEW) -> None:
    """Raise `PushSignatureInvalid` unless `signed` is `worker`'s signature over this push, made within
    `max_skew` seconds of `now`."""
    if signed.worker != worker:
        raise PushSignatureInvalid(f"the push is signed by {signed.worker}, not by {worker}")
    if abs(now - signed.timestamp) > max_skew:
        raise PushSignatureInvalid(f"the push was signed at {signed.timestamp}, more than {max_skew} s from the "
                                   f"relay's clock ({int(now)}): a replayed or delayed push (or a wrong clock)")
    message = push_message(worker, signed.task_id, resource, content_hash, signed.timestamp)
    if not verify_signature(signed.public_key, message, signed.signature):
        raise PushSignatureInvalid(f"the signature is not {worker}'s over this push ({resource} {content_hash})")


def _decimal(text: str) -> int:
    if not text.isdecimal() or len(text) > 20 or (len(text) > 1 and text[0] == "0"):
        raise ValueError(f"{text[:24]!r} is not a decimal number")
    value = int(text)
    if value >= 2**64:
        raise ValueError(f"{text[:24]!r} is out of range")
    return value
