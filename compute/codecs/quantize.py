"""Dense codecs: fp32 (no compression, the reference), fp16, and int8 with one scale per chunk.

int8 payload: scales (float32, one per chunk of CHUNK values) then one int8 per value. A value x in a chunk
with largest magnitude m is sent as rint(x / s) with s = m / 127, so the error is at most s / 2 = m / 254.
fp16 payload: IEEE half precision (round to nearest even); values beyond +-65504 are refused.
"""

from __future__ import annotations

import numpy as np

from ..errors import CodecError
from .base import Codec, finish, take, unflatten

CHUNK = 4096
FP16_MAX = 65504.0


def chunk_scales(flat: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-chunk scale m / 127 (float32) and the zero-padded (chunks, chunk) view of the values."""
    chunks = -(-len(flat) // chunk)
    padded = np.zeros(chunks * chunk, dtype=np.float32)
    padded[:len(flat)] = flat
    matrix = padded.reshape(chunks, chunk)
    scales = (np.abs(matrix).max(axis=1) / np.float32(127.0)).astype(np.float32) if chunks else np.zeros(0, np.float32)
    return scales, matrix


def quantize_int8(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """rint(values / scale) per row, 0 where the scale is 0. `values` is (rows, n), `scales` (rows,)."""
    safe = np.where(scales == 0, np.float32(1.0), scales).astype(np.float32)
    quantized = np.rint(values / safe[:, None])
    return np.clip(quantized, -127, 127).astype(np.int8)


class Float32Codec(Codec):
    name = "fp32"

    def encode_flat(self, flat: np.ndarray) -> bytes:
        return flat.astype("<f4").tobytes()

    def decode_flat(self, payload, size: int) -> np.ndarray:
        values, end = take(payload, 0, "<f4", size)
        finish(payload, end)
        return values.astype(np.float32)


class Float16Codec(Codec):
    name = "fp16"

    def encode_flat(self, flat: np.ndarray) -> bytes:
        if len(flat) and np.abs(flat).max() > FP16_MAX:
            raise CodecError(f"fp16 cannot carry values beyond {FP16_MAX}")
        return flat.astype("<f2").tobytes()

    def decode_flat(self, payload, size: int) -> np.ndarray:
        values, end = take(payload, 0, "<f2", size)
        finish(payload, end)
        return values.astype(np.float32)


class Int8Codec(Codec):
    name = "int8"

    def encode_flat(self, flat: np.ndarray) -> bytes:
        scales, matrix = chunk_scales(flat, CHUNK)
        quantized = quantize_int8(matrix, scales).reshape(-1)[:len(flat)]
        return scales.astype("<f4").tobytes() + quantized.tobytes()

    def decode_flat(self, payload, size: int) -> np.ndarray:
        chunks = -(-size // CHUNK)
        scales, offset = take(payload, 0, "<f4", chunks)
        quantized, end = take(payload, offset, "i1", size)
        finish(payload, end)
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise CodecError("int8 scales must be finite and non-negative")
        expanded = np.repeat(scales.astype(np.float32), CHUNK)[:size]
        return (quantized.astype(np.float32) * expanded).astype(np.float32)


SIGN_CHUNK = 1024


def fixed_tree_sum(rows: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Row sums of a (n, 2**m) array by pairwise addition in a fixed tree: element-wise adds only, so the
    rounding is the same on every CPU (a library reduction may reorder its additions per instruction set).

    With `scratch` (at least n * 2**m / 2 elements of the rows' dtype; `rows` itself is then overwritten),
    the levels alternate between the two instead of allocating each one."""
    spare = scratch
    while rows.shape[1] > 1:
        half = rows.shape[1] // 2
        if spare is None:
            rows = rows[:, 0::2] + rows[:, 1::2]
            continue
        target = spare[:rows.shape[0] * half].reshape(rows.shape[0], half)
        np.add(rows[:, 0::2], rows[:, 1::2], out=target)
        spare, rows = rows.reshape(-1), target
    return rows[:, 0].copy() if scratch is not None else rows[:, 0]


def chunk_sums(values: np.ndarray, chunk: int) -> np.ndarray:
    """Per-chunk sums (float64) of float32 values >= 0, the last chunk padded with zeros: the tree's first level
    straight into float64 (each float32 converted exactly, then added), then `fixed_tree_sum`. The same bits on
    every CPU."""
    chunks = -(-len(values) // chunk)
    padded = np.zeros(chunks * chunk, dtype=np.float32)
    padded[:len(values)] = values
    rows = padded.reshape(chunks, chunk)
    return fixed_tree_sum(np.add(rows[:, 0::2], rows[:, 1::2], dtype=np.float64))


def chunk_lengths(size: int, chunk: int) -> np.ndarray:
    """How many of `size` values each chunk holds (the last one may hold fewer)."""
    chunks = -(-size // chunk)
    return np.minimum(chunk, size - chunk * np.arange(chunks, dtype=np.int64))


class SignCodec(Codec):
    """One bit per value: its sign, times the chunk's mean magnitude (scaled sign, as in EF-signSGD).

    Payload: one float32 scale per chunk of SIGN_CHUNK values (mean |x| of the chunk), then the sign bits,
    packed eight to a byte, least significant bit first (1 = negative). Zero is sent as positive. A decoded
    value has the sign of the original and magnitude `scale`, so the error is at most max(|x|, scale). It is
    meant for use with error feedback, which carries the magnitude error into the next round.
    """

    name = "sign"

    def encode_flat(self, flat: np.ndarray) -> bytes:
        scales, negative = self._scales_and_signs(flat)
        return scales.astype("<f4").tobytes() + np.packbits(negative, bitorder="little").tobytes()

    def encode_and_decode(self, tensors):
        """What `decode(encode(...))` gives, read straight off the scales and signs instead of the bytes."""
        header, flat, layout = self.flatten(tensors)
        scales, negative = self._scales_and_signs(flat)
        payload = scales.astype("<f4").tobytes() + np.packbits(negative, bitorder="little").tobytes()
        values = np.repeat(scales, SIGN_CHUNK)[:len(flat)]
        _set_sign_bits(values, negative)
        return header + payload, unflatten(values, layout, copy=False)

    @staticmethod
    def _scales_and_signs(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per chunk the mean magnitude (float32, summed in float64 by a fixed tree), and x < 0 per value."""
        scales = chunk_sums(np.abs(flat), SIGN_CHUNK) / chunk_lengths(len(flat), SIGN_CHUNK)
        return scales.astype(np.float32), flat < 0

    def decode_flat(self, payload, size: int) -> np.ndarray:
        chunks = -(-size // SIGN_CHUNK)
        scales, offset = take(payload, 0, "<f4", chunks)
        packed, end = take(payload, offset, "u1", -(-size // 8))
        finish(payload, end)
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise CodecError("sign scales must be finite and non-negative")
        negative = np.unpackbits(packed, bitorder="little")[:size]
        if size % 8 and np.unpackbits(packed[-1:], bitorder="little")[size % 8:].any():
            raise CodecError("sign payload has stray bits after the last value")
        values = np.repeat(scales.astype(np.float32), SIGN_CHUNK)[:size]
        _set_sign_bits(values, negative)
        return values


def _set_sign_bits(values: np.ndarray, negative: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """values[i] = -values[i] where negative[i], for float32 values >= 0: setting the IEEE sign bit is exactly
    what multiplying by -1 gives, in one integer pass (a masked `np.negative` takes ten times longer).
    `scratch`: a uint32 array of the same length to build the bits in, instead of two fresh ones."""
    bits = values.view(np.uint32)
    if scratch is None:
        bits |= negative.astype(np.uint32) << np.uint32(31)
        return
    np.copyto(scratch, negative, casting="unsafe")
    np.left_shift(scratch, np.uint32(31), out=scratch)
    np.bitwise_or(bits, scratch, out=bits)
