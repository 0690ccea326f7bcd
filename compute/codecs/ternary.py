"""The ternary codec: each value is sent as -s, 0 or +s, with a bitmap of which values are sent.

Per chunk of TERNARY_CHUNK values, a value is sent when its magnitude is above t = 3/4 of the chunk's mean
magnitude (the sum in float64 by the same fixed tree as the sign codec's scale, t rounded to float32); it
decodes to its sign times s, the mean magnitude of the values sent in the chunk. The others decode to 0 and
stay in the error-feedback residual until they grow past the threshold. Compared with `sign`, which sends
every value at the mean magnitude, small values are not inflated to it and large ones are not cut down to
it, which brings the test loss of the compression benchmark close to the best dense run's (docs/performance.md);
a threshold of the mean itself sends fewer values but did worse.

Payload, all little-endian:

    scales   float32 per chunk: s (0 in a chunk that sends nothing)
    sent     one bit per value, packed eight to a byte, least significant bit first (1 = sent)
    signs    one bit per sent value, in order, packed the same way (1 = negative)

Size: 1 bit per value, plus 1 bit per sent value (for normal values about 0.55 of them), plus 4 bytes per
chunk: about 1.6 bits a value. The error of a decoded value is | |x| - s | for a sent value and |x| <= t for
the others.
"""

from __future__ import annotations

import numpy as np

from ..errors import CodecError
from .base import Codec, finish, take, unflatten
from .quantize import _set_sign_bits, chunk_lengths, chunk_sums

TERNARY_CHUNK = 1024
THRESHOLD = 0.75  # of the chunk's mean magnitude; exact in binary, so t = float32(sum * 0.75 / length)


class TernaryCodec(Codec):
    name = "ternary"

    def encode_flat(self, flat: np.ndarray) -> bytes:
        return self._payload(*self._quantize(flat))

    def encode_and_decode(self, tensors):
        """What `decode(encode(...))` gives, read straight off the scales, bitmap and signs."""
        header, flat, layout = self.flatten(tensors)
        scales, sent, negative = self._quantize(flat)
        return header + self._payload(scales, sent, negative), unflatten(_values(scales, sent, negative), layout, copy=False)

    @staticmethod
    def _quantize(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per chunk the scale s (float32), and per value whether it is sent and whether it is negative."""
        size = len(flat)
        if size == 0:
            return np.zeros(0, np.float32), np.zeros(0, np.bool_), np.zeros(0, np.bool_)
        magnitudes = np.abs(flat)
        lengths = chunk_lengths(size, TERNARY_CHUNK)
        thresholds = (chunk_sums(magnitudes, TERNARY_CHUNK) * THRESHOLD / lengths).astype(np.float32)
        sent = magnitudes > np.repeat(thresholds, TERNARY_CHUNK)[:size]
        counts = chunk_sums(sent.astype(np.float32), TERNARY_CHUNK)  # integers below 2**24: exact
        sums = chunk_sums(np.where(sent, magnitudes, np.float32(0)), TERNARY_CHUNK)
        scales = np.where(counts > 0, sums / np.maximum(counts, 1.0), 0.0).astype(np.float32)
        return scales, sent, flat < 0

    @staticmethod
    def _payload(scales: np.ndarray, sent: np.ndarray, negative: np.ndarray) -> bytes:
        return (scales.astype("<f4").tobytes() + np.packbits(sent, bitorder="little").tobytes()
                + np.packbits(negative[sent], bitorder="little").tobytes())

    def decode_flat(self, payload, size: int) -> np.ndarray:
        scales, offset = take(payload, 0, "<f4", -(-size // TERNARY_CHUNK))
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise CodecError("ternary scales must be finite and non-negative")
        sent = _unpack(*take(payload, offset, "u1", -(-size // 8)), size, "sent bitmap")
        offset += -(-size // 8)
        count = int(sent.sum())
        negative_sent = _unpack(*take(payload, offset, "u1", -(-count // 8)), count, "signs")
        finish(payload, offset + -(-count // 8))
        negative = np.zeros(size, np.bool_)
        negative[sent] = negative_sent
        return _values(scales, sent, negative)


def _unpack(packed: np.ndarray, _end: int, count: int, what: str) -> np.ndarray:
    bits = np.unpackbits(packed, bitorder="little")
    if bits[count:].any():
        raise CodecError(f"ternary {what} has stray bits after the last value")
    return bits[:count].astype(np.bool_)


def _values(scales: np.ndarray, sent: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """±s where sent, +0.0 elsewhere (float32)."""
    values = np.where(sent, np.repeat(scales.astype(np.float32), TERNARY_CHUNK)[:len(sent)], np.float32(0))
    values = values.astype(np.float32, copy=False)
    _set_sign_bits(values, negative & sent)
    return values
