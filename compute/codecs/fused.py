"""A worker's update in one go: pseudo-gradient, error feedback and encoding, fused for the sign, ternary and
top-k codecs.

The reference is `ErrorFeedback(codec).encode(start - end)` (`feedback.py`, `quantize.SignCodec`,
`ternary.TernaryCodec`, `topk.TopKCodec`): form the pseudo-gradient, add the residual, flatten, take per-chunk
sums (or the top k), compare, pack, rebuild what the bytes decode to, subtract it for the next residual.
Written as whole-vector numpy calls, that is a few dozen passes over arrays the size of the model, at the end
of every worker round and in every verifier's update check.

`encode_with_feedback` gives the same bytes and residual, bit for bit (the tests compare). It forms the
corrected pseudo-gradient once into a flat vector (torch, as the reference), then one compiled loop (numba)
takes each chunk through every step while it sits in the cache. For sign and ternary the loops do what the
reference does, operation for operation: every chunk sum is the same fixed tree of float64 additions
(`quantize.fixed_tree_sum`, a partial last chunk padded with zeros), every other step is elementwise in
float32 or float64, and nothing is compiled with fast-math, so no addition is reordered and no multiply-add
is fused. For top-k the loop only chooses the kept positions (`topk_fused.py`); the kept values go through
the reference's numpy operations. Other codecs take the reference path.

The loops are compiled on first use and cached beside this file (once per machine).

Scratch arrays come from a `Workspace` that the caller who encodes every round owns and passes in (the
worker's residual store, a verifier's update check); without one, each call allocates its own.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

import numba
import numpy as np
import torch

from ..errors import CodecError
from .base import Codec
from .feedback import ErrorFeedback
from .quantize import SIGN_CHUNK, SignCodec
from .ternary import TERNARY_CHUNK, THRESHOLD as TERNARY_THRESHOLD, TernaryCodec
from .topk import TopKCodec
from .topk_fused import encode_topk_in_place


class Workspace:
    """Scratch arrays by purpose, per thread, grown to the largest size asked for and reused: a worker encodes
    an update of the same size every round, and fresh multi-megabyte temporaries each cost page faults on
    first touch, which made the encoding inside a worker's round several times slower than alone (see
    `compute.memory`). Only for values that do not outlive the call that asks for them."""

    def __init__(self) -> None:
        self._local = threading.local()

    def array(self, purpose: str, dtype, size: int) -> np.ndarray:
        arrays = self._local.__dict__.setdefault("arrays", {})
        current = arrays.get(purpose)
        if current is None or current.dtype != dtype or len(current) < size:
            current = arrays[purpose] = np.empty(size, dtype=dtype)
        return current[:size]


def encode_with_feedback(codec: Codec, start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor],
                         residual: Mapping[str, torch.Tensor] | None, residual_out: Mapping[str, torch.Tensor],
                         workspace: Workspace | None = None) -> bytes:
    """The encoded update of the pseudo-gradient `start - end` plus `residual` (None: zero), as
    `ErrorFeedback(codec).encode` gives it; the new residual (what the bytes leave out) is written into
    `residual_out` (float32 tensors by name, e.g. views of its canonical bytes). Nothing else is changed.
    `workspace`: the scratch arrays to reuse (none: fresh ones for this call)."""
    if set(start) != set(end) or (residual is not None and set(residual) != set(end)) or set(residual_out) != set(end):
        raise CodecError("the start weights, end weights and residuals name different tensors")
    everything = [*start.values(), *end.values(), *(residual.values() if residual is not None else ())]
    if isinstance(codec, (SignCodec, TernaryCodec, TopKCodec)) and all(t.dtype == torch.float32 for t in everything):
        return _encode_fused(codec, start, end, residual, residual_out,
                             workspace if workspace is not None else Workspace())
    pseudo_gradient = {name: start[name] - end[name] for name in end}
    feedback = ErrorFeedback(codec)
    if residual is not None:  # read only: encode replaces it
        feedback.load_state(residual, copy=False)
    data, _ = feedback.encode(pseudo_gradient, consume=True, residual_into=residual_out)
    return data


def _encode_fused(codec: Codec, start, end, residual, residual_out, workspace: Workspace) -> bytes:
    header, layout = codec.frame(end)
    for name, shape in layout:
        if tuple(start[name].shape) != shape or residual is not None and tuple(residual[name].shape) != shape:
            raise CodecError(f"{name!r} has different shapes in the start weights, end weights or residual")
    sizes = [math.prod(shape) for _, shape in layout]
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    total = offsets[-1]

    # The corrected pseudo-gradient, flat in canonical order: (start - end) + residual, as the reference.
    corrected = workspace.array("corrected", np.float32, total)  # then the new residual, in place
    for (name, _), offset, size in zip(layout, offsets, sizes):
        target = torch.from_numpy(corrected[offset:offset + size])
        torch.sub(start[name].detach().reshape(-1), end[name].detach().reshape(-1), out=target)
        if residual is not None:
            target.add_(residual[name].detach().reshape(-1))
    if isinstance(codec, TopKCodec):
        payload = encode_topk_in_place(codec, corrected, workspace)  # `corrected` becomes the new residual
        if payload is None:
            _raise_not_finite(start, end, residual, layout)
        _write_residual(corrected, residual_out, layout, offsets, sizes)
        return header + payload
    chunks = -(-total // CHUNK)
    scales = np.empty(chunks, dtype=np.float32)
    if isinstance(codec, SignCodec):
        signs = np.empty(-(-total // 8), dtype=np.uint8)
        _sign_chunks(corrected, scales, signs)  # `corrected` becomes the new residual
        limits, payload = scales, scales.astype("<f4").tobytes() + signs.tobytes()
    else:
        thresholds = np.empty(chunks, dtype=np.float32)
        sent = np.empty(-(-total // 8), dtype=np.uint8)
        signs = np.empty(-(-total // 8), dtype=np.uint8)
        used = _ternary_chunks(corrected, TERNARY_THRESHOLD, scales, thresholds, sent, signs)
        limits, payload = thresholds, scales.astype("<f4").tobytes() + sent.tobytes() + signs[:used].tobytes()
    if not np.isfinite(limits).all():  # a chunk's sum is finite exactly when all its values are: find which
        _raise_not_finite(start, end, residual, layout)
    _write_residual(corrected, residual_out, layout, offsets, sizes)
    return header + payload


def _raise_not_finite(start, end, residual, layout) -> None:
    """Raise the reference's error for the first tensor (canonical order) whose corrected values are not all
    finite."""
    for name, _ in layout:
        corrected_tensor = start[name].detach() - end[name].detach()
        if residual is not None:
            corrected_tensor += residual[name].detach()
        if not torch.isfinite(corrected_tensor).all():
            raise CodecError(f"{name!r} has NaN or infinite values")
    raise CodecError("the update has NaN or infinite values")


def _write_residual(corrected, residual_out, layout, offsets, sizes) -> None:
    for (name, _), offset, size in zip(layout, offsets, sizes):
        residual_out[name].detach().reshape(-1).numpy()[:] = corrected[offset:offset + size]


CHUNK = SIGN_CHUNK
if TERNARY_CHUNK != CHUNK:
    raise ImportError("the fused loops take the sign and ternary codecs' chunks to be the same size")
HALF = CHUNK // 2
_compiled = numba.njit(cache=True, nogil=True, boundscheck=False)  # nogil: other threads run meanwhile


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _load(values, c, chunk, magnitudes):
    """Chunk c of `values` into `chunk`, a partial last chunk padded with zeros as the reference pads it, and
    the magnitudes into `magnitudes`; returns (the chunk's first position, how many values it holds)."""
    base = c * CHUNK
    count = min(CHUNK, values.shape[0] - base)
    for i in range(count):
        chunk[i] = values[base + i]
    for i in range(count, CHUNK):
        chunk[i] = np.float32(0.0)
    for i in range(CHUNK):
        magnitudes[i] = abs(chunk[i])
    return base, count


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _tree_sum(magnitudes, level):
    """The float64 sum of CHUNK float32 values >= 0 by `quantize.fixed_tree_sum`'s tree: adjacent pairs, level
    by level."""
    for i in range(HALF):
        level[i] = np.float64(magnitudes[2 * i]) + np.float64(magnitudes[2 * i + 1])
    width = HALF
    while width > 1:
        width //= 2
        for j in range(width):
            level[j] = level[2 * j] + level[2 * j + 1]
    return level[0]


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _pack(flags, out, first, count):
    """Bytes first.. of `out`: the first `count` flags (0 or 1), eight to a byte, least significant bit first."""
    for j in range(count):
        byte = 0
        for bit in range(8):
            byte |= flags[8 * j + bit] << bit
        out[first + j] = byte


@_compiled
def _sign_chunks(values, scales, signs):
    """`quantize.SignCodec` with error feedback: per chunk the scale (mean magnitude) and the sign bits (1 where
    x < 0); `values` is replaced by what the bytes leave out, x - (-s or +s)."""
    total = values.shape[0]
    chunk = np.empty(CHUNK, np.float32)
    magnitudes = np.empty(CHUNK, np.float32)
    level = np.empty(HALF, np.float64)
    negative = np.empty(CHUNK, np.uint8)
    for c in range((total + CHUNK - 1) // CHUNK):
        base, count = _load(values, c, chunk, magnitudes)
        for i in range(CHUNK):
            negative[i] = chunk[i] < 0
        scale = np.float32(_tree_sum(magnitudes, level) / np.float64(count))
        scales[c] = scale
        for i in range(count):
            values[base + i] = chunk[i] - (-scale if negative[i] else scale)
        _pack(negative, signs, base // 8, (count + 7) // 8)


@_compiled
def _ternary_chunks(values, ratio, scales, thresholds, sent_bits, signs):
    """`ternary.TernaryCodec` with error feedback: per chunk the threshold t (ratio times the mean magnitude), the
    scale s (mean magnitude of the values above t), the sent bitmap, and the sign bits of the sent values in
    order; `values` is replaced by what the bytes leave out, x - (+-s or 0). Returns the bytes of `signs` used."""
    total = values.shape[0]
    chunk = np.empty(CHUNK, np.float32)
    magnitudes = np.empty(CHUNK, np.float32)
    level = np.empty(HALF, np.float64)
    sent = np.empty(CHUNK, np.uint8)
    negative = np.empty(CHUNK, np.uint8)
    pending = np.uint64(0)  # sign bits not yet written (a branch-free append: which values are sent is random)
    pending_count = 0
    used = 0
    for c in range((total + CHUNK - 1) // CHUNK):
        base, count = _load(values, c, chunk, magnitudes)
        threshold = np.float32(_tree_sum(magnitudes, level) * ratio / np.float64(count))
        thresholds[c] = threshold
        taken = 0
        for i in range(CHUNK):  # padding is 0, never above t >= 0
            is_sent = magnitudes[i] > threshold
            sent[i] = is_sent
            negative[i] = chunk[i] < 0
            taken += is_sent
            magnitudes[i] = magnitudes[i] if is_sent else np.float32(0.0)
        scale = np.float32(_tree_sum(magnitudes, level) / np.float64(taken)) if taken else np.float32(0.0)
        scales[c] = scale
        for i in range(count):
            values[base + i] = chunk[i] - ((-scale if negative[i] else scale) if sent[i] else np.float32(0.0))
        _pack(sent, sent_bits, base // 8, (count + 7) // 8)
        for i in range(count):
            flag = np.uint64(sent[i])
            pending |= (np.uint64(negative[i]) & flag) << np.uint64(pending_count)
            pending_count += np.int64(flag)
            if pending_count >= 32:
                for byte in range(4):
                    signs[used + byte] = np.uint8((pending >> np.uint64(8 * byte)) & np.uint64(255))
                used += 4
                pending >>= np.uint64(32)
                pending_count -= 32
    while pending_count > 0:
        signs[used] = np.uint8(pending & np.uint64(255))
        used += 1
        pending >>= np.uint64(8)
        pending_count -= 8
    return used
