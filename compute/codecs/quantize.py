"""Dense codecs: fp32 (no compression, the reference), fp16, and int8 with one scale per chunk.

int8 payload: scales (float32, one per chunk of CHUNK values) then one int8 per value. A value x in a chunk
with largest magnitude m is sent as rint(x / s) with s = m / 127, so the error is at most s / 2 = m / 254.
fp16 payload: IEEE half precision (round to nearest even); values beyond +-65504 are refused.
"""

from __future__ import annotations

import numpy as np

from ..errors import CodecError
from .base import Codec, finish, take

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
