"""The uvarint length framing of the ABCI socket: round trips, truncation, bad prefixes, size limit."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trolly.abci_app.framing import (
    MAX_MESSAGE_BYTES,
    BadVarint,
    FrameReader,
    FramingError,
    MessageTooLarge,
    ShortRead,
    decode_frames,
    decode_uvarint,
    encode_frame,
    encode_uvarint,
    read_message,
)

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
PAYLOADS = st.lists(st.binary(max_size=300), max_size=8)


def read_all(data: bytes, max_size: int = MAX_MESSAGE_BYTES) -> list[bytes]:
    """Feed `data` to a StreamReader, then read frames until a clean end of stream."""

    async def run() -> list[bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        bodies = []
        while (body := await read_message(reader, max_size)) is not None:
            bodies.append(body)
        return bodies

    return asyncio.run(run())


def read_all_chunked(data: bytes, max_size: int = MAX_MESSAGE_BYTES, chunk_size: int = 7,
                     feed_size: int = 5) -> list[bytes]:
    """The same through FrameReader, with the bytes arriving in small pieces while it reads."""

    async def run() -> list[bytes]:
        reader = asyncio.StreamReader()

        async def feed() -> None:
            for start in range(0, len(data), feed_size):
                reader.feed_data(data[start:start + feed_size])
                await asyncio.sleep(0)
            reader.feed_eof()

        feeder = asyncio.create_task(feed())
        frames = FrameReader(reader, max_size, chunk_size=chunk_size)
        bodies = []
        try:
            while (body := await frames.read()) is not None:
                bodies.append(body)
        finally:
            feeder.cancel()
        return bodies

    return asyncio.run(run())


READERS = [read_all, read_all_chunked]


def test_known_uvarint_vectors_are_unsigned_leb128_not_zigzag():
    assert encode_uvarint(0) == b"\x00"
    assert encode_uvarint(1) == b"\x01"  # zig-zag would give 0x02
    assert encode_uvarint(127) == b"\x7f"
    assert encode_uvarint(128) == b"\x80\x01"
    assert encode_uvarint(300) == b"\xac\x02"
    assert encode_uvarint((1 << 64) - 1) == b"\xff" * 9 + b"\x01"
    assert encode_frame(b"\x12\x00") == b"\x02\x12\x00"  # a framed Request{flush}


@given(U64)
def test_uvarint_round_trip(value):
    encoded = encode_uvarint(value)
    assert len(encoded) <= 10
    assert decode_uvarint(encoded + b"tail") == (value, len(encoded))


def test_uvarint_refuses_out_of_range_values():
    with pytest.raises(ValueError):
        encode_uvarint(-1)
    with pytest.raises(ValueError):
        encode_uvarint(1 << 64)


@pytest.mark.parametrize("read", READERS)
def test_uvarint_longer_than_ten_bytes_is_bad(read):
    with pytest.raises(BadVarint):
        decode_uvarint(b"\x80" * 10 + b"\x01")
    with pytest.raises(BadVarint):
        read(b"\x80" * 11)


@pytest.mark.parametrize("read", READERS)
def test_uvarint_beyond_64_bits_is_bad(read):
    with pytest.raises(BadVarint):
        decode_uvarint(b"\xff" * 9 + b"\x02")  # 2**64 + ...
    with pytest.raises(BadVarint):
        read(b"\xff" * 9 + b"\x7f")


@pytest.mark.parametrize("read", READERS)
def test_non_minimal_varint_is_accepted_like_go(read):
    assert decode_uvarint(b"\x80\x00") == (0, 2)
    assert read(b"\x81\x00" + b"x") == [b"x"]


@given(PAYLOADS, st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=64))
def test_frames_round_trip_through_a_stream(payloads, chunk_size, feed_size):
    data = b"".join(encode_frame(p) for p in payloads)
    assert read_all(data) == payloads
    assert read_all_chunked(data, chunk_size=chunk_size, feed_size=feed_size) == payloads
    assert decode_frames(data) == (payloads, len(data))


@given(PAYLOADS, st.data())
@settings(max_examples=200)
def test_any_truncation_inside_a_frame_is_a_short_read(payloads, data):
    stream = b"".join(encode_frame(p) for p in payloads)
    boundaries = {0}
    for payload in payloads:
        boundaries.add(max(boundaries) + len(encode_frame(payload)))
    inside = [cut for cut in range(len(stream)) if cut not in boundaries]
    assume(inside)
    cut = data.draw(st.sampled_from(inside))
    with pytest.raises(ShortRead):
        read_all(stream[:cut])
    with pytest.raises(ShortRead):
        read_all_chunked(stream[:cut], chunk_size=data.draw(st.integers(min_value=1, max_value=50)))
    # The non-blocking splitter leaves the partial frame unconsumed instead.
    bodies, consumed = decode_frames(stream[:cut])
    assert consumed < cut and consumed in boundaries
    assert bodies == payloads[: len(bodies)]


@pytest.mark.parametrize("read", READERS)
def test_clean_end_between_frames_is_not_an_error(read):
    assert read(b"") == []
    assert read(encode_frame(b"a") + encode_frame(b"")) == [b"a", b""]


@given(st.integers(min_value=1, max_value=1000), st.integers(min_value=1, max_value=5000))
def test_oversize_frames_are_refused_before_reading_the_body(limit, extra):
    announced = encode_uvarint(limit + extra)  # no body follows: the reader must not wait for it
    for read in READERS:
        with pytest.raises(MessageTooLarge):
            read(announced, max_size=limit)
        assert read(encode_frame(b"x" * limit), max_size=limit) == [b"x" * limit]
    with pytest.raises(MessageTooLarge):
        decode_frames(announced, max_size=limit)


@pytest.mark.parametrize("read", READERS)
def test_default_limit_refuses_a_frame_just_over_it(read):
    with pytest.raises(MessageTooLarge):
        read(encode_uvarint(MAX_MESSAGE_BYTES + 1))


def test_frame_reader_reports_buffered_frames_and_reads_large_bodies_whole():
    async def run() -> None:
        reader = asyncio.StreamReader()
        big = b"z" * 300_000
        reader.feed_data(encode_frame(b"a") + encode_frame(b"b") + encode_frame(big))
        reader.feed_eof()
        frames = FrameReader(reader, chunk_size=16)
        assert not frames.buffered()  # nothing pulled from the stream yet
        assert await frames.read() == b"a"
        assert frames.buffered()  # "b" came in the same chunk
        assert await frames.read() == b"b"
        assert not frames.buffered()  # only part of the big frame is buffered
        assert await frames.read() == big
        assert await frames.read() is None

    asyncio.run(run())


def test_framing_errors_share_one_base():
    for error in (ShortRead, BadVarint, MessageTooLarge):
        assert issubclass(error, FramingError)
