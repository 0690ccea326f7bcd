"""The state-sync snapshot format: the app state at one height as bytes every node writes identically.

Format 1. The payload is every committed (key, value) of the state, in ascending key order (LevelDB's order),
each written as

    u32 big-endian key length, key, u32 big-endian value length, value

and the payload is cut into chunks of exactly `chunk_bytes` (the last one shorter): a record may straddle two
chunks. Nothing in it depends on the node, the time or the order blocks were stored in, so two nodes at the
same height write the same bytes, chunk for chunk. (The tree is not sent: a restoring node rebuilds it from the
pairs, and the root it gets must be the app hash the light client trusts.)

The metadata, canonical JSON (sorted keys, no spaces), names everything a restoring node checks a chunk against:

    {"app_hash": hex, "chunk_hashes": [sha256 hex of chunk 0, ...], "entries": n, "format": 1,
     "height": H, "payload_bytes": n}

and the snapshot's hash (`Snapshot.hash` in ABCI) is sha256 of the metadata bytes, so a hash commits to every
chunk. A change to any of this is a new format number; a node offered a format it does not know refuses it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Iterator

from .errors import AbciAppError

FORMAT = 1
"""The only snapshot format this version writes and reads."""

CHUNK_BYTES = 4 * 1024 * 1024
"""Payload bytes per chunk: well under the 10 MB a chunk may have here and CometBFT's 16 MB chunk message, and
small enough that a refetched chunk costs little."""

MAX_FIELD_BYTES = 64 * 1024 * 1024
"""The largest key or value a payload record may declare: bounds what a garbage length can make us buffer."""

_LENGTH = 4


class SnapshotError(AbciAppError):
    """Snapshot bytes that do not parse, or disagree with their metadata."""


@dataclass(frozen=True)
class SnapshotMetadata:
    height: int
    app_hash: bytes
    chunk_hashes: tuple[bytes, ...]
    entries: int
    payload_bytes: int
    format: int = FORMAT

    def to_bytes(self) -> bytes:
        document = {"app_hash": self.app_hash.hex(), "chunk_hashes": [h.hex() for h in self.chunk_hashes],
                    "entries": self.entries, "format": self.format, "height": self.height,
                    "payload_bytes": self.payload_bytes}
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @property
    def hash(self) -> bytes:
        return snapshot_hash(self.to_bytes())

    @property
    def chunks(self) -> int:
        return len(self.chunk_hashes)


def snapshot_hash(metadata: bytes) -> bytes:
    return hashlib.sha256(metadata).digest()


def parse_metadata(raw: bytes) -> SnapshotMetadata:
    """The metadata in `raw`, which must be exactly the canonical bytes it re-encodes to; SnapshotError if not."""
    try:
        document = json.loads(raw)
        metadata = SnapshotMetadata(
            height=_whole(document["height"], "height", 1), app_hash=bytes.fromhex(document["app_hash"]),
            chunk_hashes=tuple(bytes.fromhex(h) for h in document["chunk_hashes"]),
            entries=_whole(document["entries"], "entries", 0),
            payload_bytes=_whole(document["payload_bytes"], "payload_bytes", 0),
            format=_whole(document["format"], "format", 0))
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"snapshot metadata does not parse: {exc!r}") from None
    if metadata.format != FORMAT:
        raise SnapshotError(f"snapshot format {metadata.format} is not the format {FORMAT} this node reads")
    if len(metadata.app_hash) != 32 or any(len(h) != 32 for h in metadata.chunk_hashes) or not metadata.chunk_hashes:
        raise SnapshotError("snapshot metadata needs a 32-byte app hash and at least one 32-byte chunk hash")
    if metadata.to_bytes() != raw:
        raise SnapshotError("snapshot metadata is not in canonical form")
    return metadata


def _whole(value: object, name: str, least: int) -> int:
    if type(value) is not int or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


def encode_records(entries: Iterable[tuple[bytes, bytes]]) -> Iterator[bytes]:
    for key, value in entries:
        yield len(key).to_bytes(_LENGTH, "big") + key + len(value).to_bytes(_LENGTH, "big") + value


def chunk_payload(entries: Iterable[tuple[bytes, bytes]], chunk_bytes: int = CHUNK_BYTES
                  ) -> Iterator[tuple[bytes, int]]:
    """The payload of `entries` (ascending keys) cut into chunks: yields (chunk, entries so far). An empty
    state still gives one (empty) chunk, so every snapshot has at least one."""
    buffer = bytearray()
    count = 0
    emitted = False
    for record in encode_records(entries):
        buffer += record
        count += 1
        while len(buffer) >= chunk_bytes:
            yield bytes(buffer[:chunk_bytes]), count
            del buffer[:chunk_bytes]
            emitted = True
    if buffer or not emitted:
        yield bytes(buffer), count


class PayloadDecoder:
    """Chunks in, (key, value) pairs out: checks lengths, and keys strictly ascending (the only order a correct
    node writes). Chunk boundaries may fall anywhere in a record; `finish` refuses bytes left over."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._last_key: bytes | None = None
        self.entries = 0

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        self._buffer += chunk
        pairs = []
        offset = 0
        buffer = self._buffer
        while True:
            parsed = self._record_at(buffer, offset)
            if parsed is None:
                break
            key, value, offset = parsed
            if self._last_key is not None and key <= self._last_key:
                raise SnapshotError(f"snapshot payload keys are out of order at entry {self.entries}")
            self._last_key = key
            self.entries += 1
            pairs.append((key, value))
        del buffer[:offset]
        return pairs

    @staticmethod
    def _record_at(buffer: bytearray, offset: int) -> tuple[bytes, bytes, int] | None:
        if len(buffer) - offset < _LENGTH:
            return None
        key_length = int.from_bytes(buffer[offset:offset + _LENGTH], "big")
        if not 0 < key_length <= MAX_FIELD_BYTES:
            raise SnapshotError(f"snapshot payload declares a key of {key_length} bytes")
        value_at = offset + _LENGTH + key_length
        if len(buffer) - value_at < _LENGTH:
            return None
        value_length = int.from_bytes(buffer[value_at:value_at + _LENGTH], "big")
        if value_length > MAX_FIELD_BYTES:
            raise SnapshotError(f"snapshot payload declares a value of {value_length} bytes")
        end = value_at + _LENGTH + value_length
        if len(buffer) < end:
            return None
        return bytes(buffer[offset + _LENGTH:value_at]), bytes(buffer[value_at + _LENGTH:end]), end

    def finish(self) -> None:
        if self._buffer:
            raise SnapshotError(f"snapshot payload ends inside a record ({len(self._buffer)} bytes left over)")
