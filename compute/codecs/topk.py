"""Top-k sparsification with chunk-local 16-bit indices, values in fp32, fp16 or int8.

The flat update is cut into chunks of CHUNK = 65,536 values, so a position inside a chunk fits in 16 bits
(half the bytes of a global 32-bit index). From a chunk of L values the codec keeps k = ceil(L * density)
values: those of largest magnitude, ties broken by the lower index, which defines the choice exactly (no
dependence on a sort's stability). Everything else decodes as zero; `ErrorFeedback` carries it to the next
round so nothing is lost for good.

Payload: all chunks' indices (uint16, ascending within each chunk), then all values (float32 / float16 /
int8), then for int8 one float32 scale per chunk (largest kept magnitude / 127).
"""

from __future__ import annotations

import fractions

import numpy as np

from ..errors import CodecError
from .base import Codec, finish, take, unflatten
from .quantize import FP16_MAX, quantize_int8

CHUNK = 65536
VALUE_FORMATS = ("fp32", "fp16", "int8")


def kept_per_chunk(length: int, density: fractions.Fraction) -> int:
    return min(length, -(-length * density.numerator // density.denominator))


def select_top(values: np.ndarray, k: int) -> np.ndarray:
    """Ascending indices of the k largest |values|, ties to the lower index."""
    magnitude = np.abs(values)
    if k >= len(values):
        return np.arange(len(values))
    threshold = np.partition(magnitude, len(values) - k)[len(values) - k]  # the k-th largest magnitude
    above = np.flatnonzero(magnitude > threshold)
    tied = np.flatnonzero(magnitude == threshold)[: k - len(above)]
    return np.sort(np.concatenate([above, tied]))


class TopKCodec(Codec):
    def __init__(self, name: str, density: fractions.Fraction, value_format: str, chunk: int = CHUNK) -> None:
        """`chunk`: values per chunk, CHUNK for every registered codec (other sizes let tests cross chunk
        boundaries with small vectors); at most CHUNK, so that a chunk-local index fits in 16 bits."""
        if not 0 < density <= 1:
            raise CodecError(f"density must be in (0, 1], got {density}")
        if value_format not in VALUE_FORMATS:
            raise CodecError(f"value format must be one of {VALUE_FORMATS}")
        if not 0 < chunk <= CHUNK:
            raise CodecError(f"chunk must be in (0, {CHUNK}], got {chunk}")
        self.name = name
        self.density = fractions.Fraction(density)
        self.value_format = value_format
        self.chunk = chunk

    def _chunk_lengths(self, size: int) -> list[int]:
        return [min(self.chunk, size - start) for start in range(0, size, self.chunk)]

    def encode_flat(self, flat: np.ndarray) -> bytes:
        return self._encode(flat, None)

    def encode_and_decode(self, tensors):
        """What `decode(encode(...))` gives, written while encoding: each chunk's kept values, as the bytes
        carry them (the same float32 products for int8), at their positions, zeros elsewhere, instead of parsing
        the bytes back. Every worker's round and every verifier's update check run it (the tests compare)."""
        header, flat, layout = self.flatten(tensors)
        sent = np.zeros(len(flat), dtype=np.float32)
        payload = self._encode(flat, sent)
        return header + payload, unflatten(sent, layout, copy=False)

    def _encode(self, flat: np.ndarray, sent: np.ndarray | None) -> bytes:
        """The payload; with `sent`, also writes there what the payload decodes to."""
        indices, values, scales = [], [], []
        for number, length in enumerate(self._chunk_lengths(len(flat))):
            chunk = flat[number * self.chunk:number * self.chunk + length]
            chosen = select_top(chunk, kept_per_chunk(length, self.density))
            indices.append(chosen.astype("<u2"))
            kept = chunk[chosen]
            if self.value_format == "int8":
                scale = (np.abs(kept).max() / np.float32(127.0)).astype(np.float32) if len(kept) else np.float32(0)
                scales.append(np.float32(scale))
                kept = quantize_int8(kept.reshape(1, -1), np.array([scale], dtype=np.float32)).reshape(-1)
            values.append(kept)
            if sent is not None:
                sent[number * self.chunk + chosen] = self._as_decoded(kept, scales[-1] if self.value_format == "int8" else None)
        if not indices:
            return b""
        body = np.concatenate(indices).tobytes()
        stacked = np.concatenate(values)
        if self.value_format == "fp32":
            body += stacked.astype("<f4").tobytes()
        elif self.value_format == "fp16":
            if len(stacked) and np.abs(stacked).max() > FP16_MAX:
                raise CodecError(f"fp16 cannot carry values beyond {FP16_MAX}")
            body += stacked.astype("<f2").tobytes()
        else:
            body += stacked.astype("i1").tobytes() + np.array(scales, dtype="<f4").tobytes()
        return body

    def _as_decoded(self, kept: np.ndarray, scale) -> np.ndarray:
        """Kept values as `decode_flat` rebuilds them from the bytes, operation for operation."""
        if self.value_format == "fp32":
            return kept.astype("<f4").astype(np.float32)
        if self.value_format == "fp16":
            return kept.astype("<f2").astype(np.float32)
        return (kept.astype(np.float32) * np.float32(scale)).astype(np.float32)

    def decode_flat(self, payload, size: int) -> np.ndarray:
        lengths = self._chunk_lengths(size)
        counts = [kept_per_chunk(length, self.density) for length in lengths]
        total = sum(counts)
        indices, offset = take(payload, 0, "<u2", total)
        value_dtype = {"fp32": "<f4", "fp16": "<f2", "int8": "i1"}[self.value_format]
        values, offset = take(payload, offset, value_dtype, total)
        values = values.astype(np.float32)
        if self.value_format == "int8":
            scales, offset = take(payload, offset, "<f4", len(lengths))
            if not np.isfinite(scales).all() or (scales < 0).any():
                raise CodecError("top-k int8 scales must be finite and non-negative")
            values = (values * np.repeat(scales.astype(np.float32), counts)).astype(np.float32)
        finish(payload, offset)
        flat = np.zeros(size, dtype=np.float32)
        begin = 0
        for number, (length, count) in enumerate(zip(lengths, counts)):
            chunk_indices = indices[begin:begin + count].astype(np.int64)
            if count and (chunk_indices[-1] >= length or (count > 1 and not (np.diff(chunk_indices) > 0).all())):
                raise CodecError(f"top-k indices of chunk {number} are out of range or not strictly ascending")
            flat[number * self.chunk + chunk_indices] = values[begin:begin + count]
            begin += count
        return flat
