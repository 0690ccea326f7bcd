"""Top-k with error feedback in one go: the fast path of `fused.encode_with_feedback` for the top-k codecs.

The reference is `TopKCodec.encode_and_decode` under `ErrorFeedback` (`topk.py`, `feedback.py`): per chunk,
`np.abs`, `np.partition` for the k-th largest magnitude, two `np.flatnonzero` scans, a concatenation and a
sort for the kept indices, then the values. Every worker runs it at the end of its round and every verifier
in each update check.

Here one compiled loop (numba) picks each chunk's kept positions: magnitudes are compared by their bit
patterns (for finite float32 values >= 0, as `np.abs` leaves them, the order of the bit patterns is the order
of the values), the k-th largest is found by counting them in three digit ranges (bits 30-20, 19-8, 7-0:
a histogram over the chunk, then, over the values from the chosen bin up, gathered in index order by a
second scan, histograms of the ones still tied), and one pass over those keeps every value above it and the
first ones equal to it until k are kept. That is the reference's choice
exactly: the k largest magnitudes, ties to the lower index, indices ascending. The kept values then go
through the reference's own numpy operations (int8 scales, rounding, fp16 conversion), elementwise on the
kept values only, so their bytes and what they decode to are the reference's bit for bit (the tests compare).
"""

from __future__ import annotations

import numba
import numpy as np

from ..errors import CodecError
from .quantize import FP16_MAX
from .topk import TopKCodec, kept_per_chunk

MAGNITUDE_BITS = np.uint32(0x7FFFFFFF)
NOT_FINITE = np.uint32(0x7F800000)  # magnitude bit patterns from here up are infinities and NaNs


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _select(bits, chunk_size, k_full, k_last, local, positions, histogram, candidates, candidate_positions):
    """Kept positions of every chunk of `bits` (float32 bit patterns): chunk-local ones into `local`, global
    ones into `positions`, chunk after chunk. Returns how many, or -1 when a value is NaN or infinite."""
    total = bits.shape[0]
    chunks = (total + chunk_size - 1) // chunk_size
    kept = 0
    for c in range(chunks):
        base = c * chunk_size
        count = min(chunk_size, total - base)
        wanted = k_full if c < chunks - 1 else k_last
        # Digit 1 (bits 30-20) over the whole chunk, in four interleaved histograms: neighbouring values
        # often share a bin, and one histogram would make each count wait for the one before.
        for b in range(4 * 2048):
            histogram[b] = 0
        for i in range(count):
            histogram[(i & 3) * 2048 + ((bits[base + i] & MAGNITUDE_BITS) >> 20)] += 1
        for b in range(2048):
            histogram[b] += histogram[2048 + b] + histogram[4096 + b] + histogram[6144 + b]
        for b in range(NOT_FINITE >> 20, 2048):  # the bins of infinities and NaNs
            if histogram[b]:
                return -1
        remaining = wanted  # rank of the k-th largest among the values not yet counted above it
        digit = 2047
        while histogram[digit] < remaining:
            remaining -= histogram[digit]
            digit -= 1
        # Every value from the chosen bin up, in index order: the kept ones are among them.
        floor = np.uint32(digit) << np.uint32(20)
        left = 0
        for i in range(count):
            magnitude = bits[base + i] & MAGNITUDE_BITS
            candidates[left] = magnitude
            candidate_positions[left] = i
            left += magnitude >= floor
        # Digits 2 (bits 19-8) and 3 (bits 7-0) over the candidates still tied with the k-th largest so far.
        threshold = floor
        mask = np.uint32(0xFFF00000)
        for shift, bins in ((8, 4096), (0, 256)):
            for b in range(bins):
                histogram[b] = 0
            for j in range(left):
                if candidates[j] & mask == threshold:
                    histogram[(candidates[j] >> shift) & (bins - 1)] += 1
            digit = bins - 1
            while histogram[digit] < remaining:
                remaining -= histogram[digit]
                digit -= 1
            threshold |= np.uint32(digit) << np.uint32(shift)
            mask |= np.uint32(bins - 1) << np.uint32(shift)
        # `threshold` is the k-th largest magnitude; `remaining` values equal to it are kept, the first ones.
        for j in range(left):
            magnitude = candidates[j]
            if magnitude > threshold or (magnitude == threshold and remaining > 0):
                if magnitude == threshold:
                    remaining -= 1
                local[kept] = candidate_positions[j]
                positions[kept] = base + candidate_positions[j]
                kept += 1
    return kept


def encode_topk_in_place(codec: TopKCodec, values: np.ndarray, workspace) -> bytes | None:
    """The top-k payload of the flat float32 vector `values` (the corrected pseudo-gradient, canonical order),
    which then holds what the payload leaves out (the new residual). None, with `values` unchanged, when a value
    is NaN or infinite. `workspace.array(purpose, dtype, size)` gives reusable scratch arrays."""
    total = len(values)
    if total == 0:
        return b""
    chunk = codec.chunk
    chunks = -(-total // chunk)
    last = total - (chunks - 1) * chunk
    k_full, k_last = kept_per_chunk(min(chunk, total), codec.density), kept_per_chunk(last, codec.density)
    kept_total = (chunks - 1) * k_full + k_last
    local = workspace.array("topk-local", np.uint16, kept_total)
    positions = workspace.array("topk-positions", np.int64, kept_total)
    histogram = workspace.array("topk-histogram", np.int64, 4 * 2048)
    candidates = workspace.array("topk-candidates", np.uint32, chunk + 1)  # + 1: the branch-free append's last write
    candidate_positions = workspace.array("topk-candidate-positions", np.int64, chunk + 1)
    kept = _select(values.view(np.uint32), chunk, k_full, k_last, local, positions, histogram, candidates,
                   candidate_positions)
    if kept < 0:
        return None
    if kept != kept_total:  # pragma: no cover - the selection keeps exactly k per chunk by construction
        raise CodecError(f"top-k kept {kept} values, {kept_total} expected")
    chosen = values[positions]
    counts = np.full(chunks, k_full, dtype=np.int64)
    counts[-1] = k_last
    if codec.value_format == "fp32":
        body, decoded = chosen.astype("<f4").tobytes(), chosen.astype("<f4").astype(np.float32)
    elif codec.value_format == "fp16":
        if np.abs(chosen).max() > FP16_MAX:
            raise CodecError(f"fp16 cannot carry values beyond {FP16_MAX}")
        body, decoded = chosen.astype("<f2").tobytes(), chosen.astype("<f2").astype(np.float32)
    else:  # int8: per chunk the scale (largest kept magnitude / 127), as `TopKCodec._encode` computes it
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        scales = (np.maximum.reduceat(np.abs(chosen), starts) / np.float32(127.0)).astype(np.float32)
        per_value = np.repeat(scales, counts)
        safe = np.where(per_value == 0, np.float32(1.0), per_value).astype(np.float32)  # `quantize.quantize_int8`
        quantized = np.clip(np.rint(chosen / safe), -127, 127).astype(np.int8)
        body = quantized.astype("i1").tobytes() + scales.astype("<f4").tobytes()
        decoded = (quantized.astype(np.float32) * per_value).astype(np.float32)
    values[positions] = chosen - decoded  # the residual: what the bytes leave out (elsewhere all of it)
    return local[:kept].astype("<u2").tobytes() + body
