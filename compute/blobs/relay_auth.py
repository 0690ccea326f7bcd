"""How a worker signs what it pushes to a blob relay, and how the relay checks it (docs/protocol.md 3a).

A push carries six headers:

    Trolly-Relay:       the relay's base URL, as the worker registered it (the relay it means to push to)
    Trolly-Task:        the task id the blob belongs to (decimal)
    Trolly-Round:       the task's round the push is for (decimal)
    Trolly-Public-Key:  the worker's ed25519 public key (64 hex digits); its address must be the worker's
    Trolly-Time:        the signing time, whole Unix seconds (decimal)
    Trolly-Signature:   ed25519 over `push_message(...)` (128 hex digits)

The signed message names the relay, the worker, the task, the round, what is pushed (`blob`, or `checkpoints`
for the round's listing), the sha256 of the content (the blob's name, or of the listing's body) and the time,
one per line after a domain line. A signature is good for that content, at that relay, in that round of that
task, by that worker, and nothing else: a relay that received a push cannot play it to another relay (which
knows itself by other URLs), nor can anyone play it in a later round (the relay reads the task's round from
the chain). The relay accepts a signature only within `max_skew` seconds of its own clock, so an old push
cannot be played again once the worker has left the task (a replay inside the window, at the same relay and
round, stores the same bytes again: harmless).

The relay's name is compared in one form (`relay_identity`): scheme and host in lower case, no default port,
no trailing slash. A push in the first format (`trolly-relay-push/v1`, which named neither the relay nor the
round) is refused with a message that says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from trolly.chain.crypto import PrivateKey, address_from_pubkey, encode_address, verify_signature
from trolly.chain.errors import ChainError
from trolly.chain.market.urls import check_relay_url

from .errors import BlobRejected

PUSH_DOMAIN = "trolly-relay-push/v2"
RELAY_HEADER = "Trolly-Relay"
TASK_HEADER = "Trolly-Task"
ROUND_HEADER = "Trolly-Round"
PUBLIC_KEY_HEADER = "Trolly-Public-Key"
TIME_HEADER = "Trolly-Time"
SIGNATURE_HEADER = "Trolly-Signature"
SIGNED_HEADERS = (RELAY_HEADER, TASK_HEADER, ROUND_HEADER, PUBLIC_KEY_HEADER, TIME_HEADER, SIGNATURE_HEADER)
FIRST_FORMAT_HEADERS = (TASK_HEADER, PUBLIC_KEY_HEADER, TIME_HEADER, SIGNATURE_HEADER)
"""What a `trolly-relay-push/v1` push carried: with neither `Trolly-Relay` nor `Trolly-Round`, such a push is
told it is of the old format rather than merely unsigned."""
DEFAULT_MAX_SKEW = 300
"""Seconds a push's signing time may lie before or after the relay's clock."""
_DEFAULT_PORTS = {"http": "80", "https": "443"}


class PushUnsigned(BlobRejected):
    """A push without valid signature headers, or in the old format (HTTP 401)."""


class PushSignatureInvalid(BlobRejected):
    """A push whose signature is not the worker's over this content and time, or whose time is outside the
    relay's window (HTTP 401)."""


class PushForAnotherRelay(BlobRejected):
    """A push signed for a relay other than this one (HTTP 421, Misdirected Request): played from elsewhere, or
    this relay does not know the URL its workers reach it by (`--public-url`)."""


def relay_identity(url: str) -> str:
    """`url` (a relay URL the chain would accept, `check_relay_url`) in the one form pushes sign: scheme and host
    in lower case, without the scheme's default port or a trailing slash. Raises ValueError for any other URL."""
    try:
        check_relay_url(url)
    except ChainError as error:
        raise ValueError(error.log) from None
    scheme, _, rest = url.partition("://")
    authority, _, path = rest.partition("/")
    host, port = authority, ""
    if authority.rfind(":") > authority.rfind("]"):
        host, _, port = authority.rpartition(":")
    if port == _DEFAULT_PORTS[scheme]:
        port = ""
    path = path.rstrip("/")
    return f"{scheme}://{host.lower()}{':' + port if port else ''}{'/' + path if path else ''}"


def push_message(relay: str, worker: str, task_id: int, round_index: int, resource: str, content_hash: str,
                 timestamp: int) -> bytes:
    """The bytes a push's signature covers (`relay` in its `relay_identity` form)."""
    return "\n".join([PUSH_DOMAIN, relay, worker, str(task_id), str(round_index), resource, content_hash,
                      str(timestamp)]).encode()


def sign_push(key: PrivateKey, relay: str, task_id: int, round_index: int, resource: str, content_hash: str,
              timestamp: int) -> dict[str, str]:
    """The headers of a push to the relay at `relay` of `resource` (content `content_hash`) for round
    `round_index` of task `task_id`, signed by `key`."""
    relay = relay_identity(relay)
    worker = encode_address(key.address)
    signature = key.sign(push_message(relay, worker, task_id, round_index, resource, content_hash, timestamp))
    return {RELAY_HEADER: relay, TASK_HEADER: str(task_id), ROUND_HEADER: str(round_index),
            PUBLIC_KEY_HEADER: key.pubkey.hex(), TIME_HEADER: str(timestamp), SIGNATURE_HEADER: signature.hex()}


@dataclasses.dataclass(frozen=True)
class PushSignature:
    """A push's signature headers, read."""

    relay: str
    task_id: int
    round_index: int
    public_key: bytes
    timestamp: int
    signature: bytes

    @property
    def worker(self) -> str:
        return encode_address(address_from_pubkey(self.public_key))


def read_push_headers(headers: Mapping[str, str]) -> PushSignature:
    """The signature headers of a push; `PushUnsigned` when one is missing or malformed, or the push is in the
    old format."""
    missing = [name for name in SIGNED_HEADERS if name not in headers]
    if missing and all(name in headers for name in FIRST_FORMAT_HEADERS):
        raise PushUnsigned(f"a push in the old format (trolly-relay-push/v1, without {', '.join(missing)}) is "
                           f"refused: pushes now sign the relay and the round; update the worker "
                           f"(docs/protocol.md 3a)")
    if missing:
        raise PushUnsigned(f"unsigned push: missing {', '.join(missing)} (pushes are signed by a member of the "
                           f"task: docs/protocol.md 3a)")
    try:
        task_id, round_index = _decimal(headers[TASK_HEADER]), _decimal(headers[ROUND_HEADER])
        timestamp = _decimal(headers[TIME_HEADER])
        public_key, signature = bytes.fromhex(headers[PUBLIC_KEY_HEADER]), bytes.fromhex(headers[SIGNATURE_HEADER])
        relay = headers[RELAY_HEADER]
        if relay_identity(relay) != relay:
            raise ValueError(f"{RELAY_HEADER} {relay[:100]!r} is not a relay URL in its signed form "
                             f"({relay_identity(relay)!r})")
    except ValueError as error:
        raise PushUnsigned(f"malformed signature headers: {error}") from None
    if len(public_key) != 32 or len(signature) != 64:
        raise PushUnsigned("malformed signature headers: the public key is 32 bytes, the signature 64 (hex)")
    return PushSignature(relay, task_id, round_index, public_key, timestamp, signature)


def check_push(signed: PushSignature, known_as: Iterable[str], worker: str, resource: str, content_hash: str,
               now: float, max_skew: int = DEFAULT_MAX_SKEW) -> None:
    """Raise unless `signed` is `worker`'s signature over this push to a relay known by one of the URLs
    `known_as` (in `relay_identity` form), made within `max_skew` seconds of `now`: `PushForAnotherRelay` for
    another relay's push, `PushSignatureInvalid` for anything else."""
    known_as = tuple(known_as)
    if signed.relay not in known_as:
        raise PushForAnotherRelay(f"the push is signed for the relay {signed.relay}; this relay is "
                                  f"{' or '.join(known_as) or 'known by no URL'}: a push made for another relay "
                                  f"is refused (a relay behind a proxy names its URL with --public-url)")
    if signed.worker != worker:
        raise PushSignatureInvalid(f"the push is signed by {signed.worker}, not by {worker}")
    if abs(now - signed.timestamp) > max_skew:
        raise PushSignatureInvalid(f"the push was signed at {signed.timestamp}, more than {max_skew} s from the "
                                   f"relay's clock ({int(now)}): a replayed or delayed push (or a wrong clock)")
    message = push_message(signed.relay, worker, signed.task_id, signed.round_index, resource, content_hash,
                           signed.timestamp)
    if not verify_signature(signed.public_key, message, signed.signature):
        raise PushSignatureInvalid(f"the signature is not {worker}'s over this push ({resource} {content_hash})")


def _decimal(text: str) -> int:
    if not text.isascii() or not text.isdecimal() or len(text) > 20 or (len(text) > 1 and text[0] == "0"):
        raise ValueError(f"{text[:24]!r} is not a decimal number")
    value = int(text)
    if value >= 2**64:
        raise ValueError(f"{text[:24]!r} is out of range")
    return value
