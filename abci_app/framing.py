"""The ABCI socket framing: every message is `uvarint(length) || protobuf bytes`.

CometBFT v0.38 writes the length as an *unsigned* LEB128 varint (Go's `binary.PutUvarint`): seven bits per
byte, least significant group first, high bit set on every byte but the last. (v0.34 and the py-abci
library used a zig-zag *signed* varint; reading one as the other doubles every length, so it matters.)

A frame whose length exceeds `MAX_MESSAGE_BYTES` is refused before any of its body is read, so a peer cannot
make the app buffer an arbitrary amount of memory. Failures are typed, all under `FramingError`:
`ShortRead` (the stream ended inside a frame), `BadVarint` (a length prefix longer than 10 bytes or beyond
64 bits) and `MessageTooLarge`. A clean end of stream between frames is not an error: `read_message`
returns None.

`read_message` is the reference reader (byte by byte for the prefix); `FrameReader` is the chunked reader
the server uses, with the same results and errors (both are tested against the same properties);
`decode_frames` splits frames out of a byte buffer without any I/O.
"""

from __future__ import annotations

import asyncio

from .errors import AbciAppError

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest frame body accepted, 64 MiB. A FinalizeBlock request carries a whole block, and CometBFT's default
block limit (`block.max_bytes`) is 21 MiB; 64 MiB leaves room for that plus commit info and evidence, while
staying below CometBFT's own 100 MB cap on ABCI messages. A chain that raises `block.max_bytes` above ~60 MiB
must raise this too."""

MAX_VARINT_BYTES = 10
"""A 64-bit value needs at most ceil(64 / 7) = 10 LEB128 bytes."""

_U64_MAX = (1 << 64) - 1


class FramingError(AbciAppError):
    """A frame on the ABCI socket could not be read; the connection it came on is unusable."""


class ShortRead(FramingError):
    """The stream ended in the middle of a frame (inside the length prefix or the body)."""


class BadVarint(FramingError):
    """The length prefix is not a valid unsigned 64-bit varint."""


class MessageTooLarge(FramingError):
    """The frame announces a body larger than the maximum message size."""


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative integer below 2**64."""
    if value < 0 or value > _U64_MAX:
        raise ValueError(f"uvarint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(data: bytes, offset: int = 0) -> tuple[int, int]:
    """Decode a uvarint at `offset`; returns (value, offset just past it).

    Raises ShortRead if `data` ends before the last byte, BadVarint if it is longer than 10 bytes or
    does not fit in 64 bits. Non-minimal encodings (e.g. 0x80 0x00) are accepted, as Go's reader does.
    """
    value = 0
    for index in range(MAX_VARINT_BYTES):
        position = offset + index
        if position >= len(data):
            raise ShortRead("stream ended inside a varint length prefix")
        byte = data[position]
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            if value > _U64_MAX:
                raise BadVarint("varint length prefix overflows 64 bits")
            return value, position + 1
    raise BadVarint(f"varint length prefix longer than {MAX_VARINT_BYTES} bytes")


def encode_frame(payload: bytes) -> bytes:
    """One frame: the uvarint length of `payload`, then `payload`."""
    return encode_uvarint(len(payload)) + payload


async def read_uvarint(reader: asyncio.StreamReader) -> int | None:
    """Read one uvarint from the stream; None on a clean end of stream before its first byte."""
    prefix = bytearray()
    while True:
        byte = await reader.read(1)
        if not byte:
            if not prefix:
                return None
            raise ShortRead("stream ended inside a varint length prefix")
        prefix += byte
        if byte[0] < 0x80:
            return decode_uvarint(bytes(prefix))[0]
        if len(prefix) >= MAX_VARINT_BYTES:
            raise BadVarint(f"varint length prefix longer than {MAX_VARINT_BYTES} bytes")


async def read_message(reader: asyncio.StreamReader, max_size: int = MAX_MESSAGE_BYTES) -> bytes | None:
    """Read one frame and return its body; None on a clean end of stream between frames.

    Raises ShortRead, BadVarint or MessageTooLarge (the body of an oversize frame is never read).
    """
    length = await read_uvarint(reader)
    if length is None:
        return None
    if length > max_size:
        raise MessageTooLarge(f"frame of {length} bytes exceeds the {max_size}-byte limit")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as error:
        raise ShortRead(f"stream ended after {len(error.partial)} of {length} body bytes") from None


def decode_frames(buffer: bytes, max_size: int = MAX_MESSAGE_BYTES) -> tuple[list[bytes], int]:
    """Split complete frames off the front of `buffer`; returns (bodies, bytes consumed).

    A trailing partial frame is left unconsumed (not an error here: more bytes may come). Raises BadVarint
    or MessageTooLarge like `read_message`.
    """
    bodies: list[bytes] = []
    offset = 0
    while offset < len(buffer):
        try:
            length, body_start = decode_uvarint(buffer, offset)
        except ShortRead:
            break
        if length > max_size:
            raise MessageTooLarge(f"frame of {length} bytes exceeds the {max_size}-byte limit")
        if body_start + length > len(buffer):
            break
        bodies.append(bytes(buffer[body_start:body_start + length]))
        offset = body_start + length
    return bodies, offset


class FrameReader:
    """Reads frames from a stream in large chunks (the fast path beside `read_message`, same errors).

    `read_message` awaits the stream once per prefix byte; this reader pulls up to `chunk_size` bytes at a
    time and splits frames out of its buffer, so a pipeline of small requests (CheckTx, Echo) costs one
    await per chunk. A large body is completed with one `readexactly`. `buffered()` tells whether another
    complete frame is already waiting, so a server can postpone draining its writer until the batch ends.
    """

    def __init__(self, reader: asyncio.StreamReader, max_size: int = MAX_MESSAGE_BYTES,
                 chunk_size: int = 1 << 16) -> None:
        self._reader = reader
        self._max_size = max_size
        self._chunk_size = chunk_size
        self._buffer = b""
        self._offset = 0  # start of the unread part of _buffer

    def _next_frame(self) -> tuple[int, int] | None:
        """(body start, body length) of the next frame if its prefix is complete; raises on a bad prefix."""
        if self._offset >= len(self._buffer):
            return None
        try:
            length, body_start = decode_uvarint(self._buffer, self._offset)
        except ShortRead:
            return None
        if length > self._max_size:
            raise MessageTooLarge(f"frame of {length} bytes exceeds the {self._max_size}-byte limit")
        return body_start, length

    def buffered(self) -> bool:
        """True if a complete frame is already in the buffer (reading it will not wait)."""
        try:
            frame = self._next_frame()
        except FramingError:
            return True  # reading it will not wait either: it raises at once
        return frame is not None and frame[0] + frame[1] <= len(self._buffer)

    async def read(self) -> bytes | None:
        """The next frame's body; None on a clean end of stream between frames."""
        while True:
            frame = self._next_frame()
            if frame is not None:
                body_start, length = frame
                end = body_start + length
                if end <= len(self._buffer):
                    self._offset = end
                    return self._buffer[body_start:end]
                have = self._buffer[body_start:]
                self._buffer, self._offset = b"", 0
                try:
                    return have + await self._reader.readexactly(length - len(have))
                except asyncio.IncompleteReadError as error:
                    received = len(have) + len(error.partial)
                    raise ShortRead(f"stream ended after {received} of {length} body bytes") from None
            chunk = await self._reader.read(self._chunk_size)
            rest = self._buffer[self._offset:]
            if not chunk:
                if rest:
                    raise ShortRead(f"stream ended inside a frame ({len(rest)} bytes of it received)")
                return None
            self._buffer, self._offset = rest + chunk, 0
