"""A worker's update in one go: pseudo-gradient, error feedback and encoding, fused for the sign codec.

The reference is `ErrorFeedback(codec).encode(start - end)` (`feedback.py`, `quantize.SignCodec`): form the
pseudo-gradient, add the residual, flatten, take per-chunk means and signs, rebuild what the bytes decode to,
subtract it for the next residual. Written as whole-vector numpy and torch calls, that is about 25 passes
over 4.4 MB arrays for the 1.1M-parameter MLP. Memory-bound, it took 14-30 ms at the end of each worker
round (4 ms in a warm loop), and that time comes after training, when the round is otherwise nearly done.

`encode_with_feedback` gives the same bytes and residual, bit for bit (the tests compare). For the sign and
ternary codecs it forms the pseudo-gradient once into a flat vector, then runs every other step on blocks of
`BLOCK_CHUNKS` chunks that stay in a core's L2 cache. A block is whole chunks, and every operation is
elementwise or within one chunk, so no value is computed differently. Other codecs take the reference path.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

import numpy as np
import torch

from ..errors import CodecError
from .base import Codec
from .feedback import ErrorFeedback
from .quantize import SIGN_CHUNK, SignCodec, _set_sign_bits, fixed_tree_sum
from .ternary import TERNARY_CHUNK, THRESHOLD as TERNARY_THRESHOLD, TernaryCodec

BLOCK_CHUNKS = 64  # 65,536 values a block: its scratch arrays, about 1.3 MB together, fit a 2 MB L2 cache


class _Workspace:
    """Scratch arrays by purpose, per thread, grown to the largest size asked for and reused: a worker encodes
    an update of the same size every round, and fresh multi-megabyte temporaries each cost page faults on
    first touch (measured inside the worker's round: the sign codec took 6-28 ms instead of 4; see
    `compute.memory`). Only for values that do not outlive the call that asks for them."""

    def __init__(self) -> None:
        self._local = threading.local()

    def array(self, purpose: str, dtype, size: int) -> np.ndarray:
        arrays = self._local.__dict__.setdefault("arrays", {})
        current = arrays.get(purpose)
        if current is None or current.dtype != dtype or len(current) < size:
            current = arrays[purpose] = np.empty(size, dtype=dtype)
        return current[:size]


_workspace = _Workspace()


def encode_with_feedback(codec: Codec, start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor],
                         residual: Mapping[str, torch.Tensor] | None,
                         residual_out: Mapping[str, torch.Tensor]) -> bytes:
    """The encoded update of the pseudo-gradient `start - end` plus `residual` (None: zero), as
    `ErrorFeedback(codec).encode` gives it; the new residual (what the bytes leave out) is written into
    `residual_out` (float32 tensors by name, e.g. views of its canonical bytes). Nothing else is changed."""
    if set(start) != set(end) or (residual is not None and set(residual) != set(end)) or set(residual_out) != set(end):
        raise CodecError("the start weights, end weights and residuals name different tensors")
    everything = [*start.values(), *end.values(), *(residual.values() if residual is not None else ())]
    if isinstance(codec, (SignCodec, TernaryCodec)) and all(t.dtype == torch.float32 for t in everything):
        return _encode_blocked(codec, start, end, residual, residual_out)
    pseudo_gradient = {name: start[name] - end[name] for name in end}
    feedback = ErrorFeedback(codec)
    if residual is not None:  # read only: encode replaces it
        feedback.load_state(residual, copy=False)
    data, _ = feedback.encode(pseudo_gradient, consume=True, residual_into=residual_out)
    return data


def _encode_blocked(codec: Codec, start, end, residual, residual_out) -> bytes:
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
    corrected = _workspace.array("corrected", np.float32, total)
    for (name, _), offset, size in zip(layout, offsets, sizes):
        target = torch.from_numpy(corrected[offset:offset + size])
        torch.sub(start[name].detach().reshape(-1), end[name].detach().reshape(-1), out=target)
        if residual is not None:
            target.add_(residual[name].detach().reshape(-1))
    outputs = [residual_out[name].detach().reshape(-1).numpy() for name, _ in layout]

    encoder = _SignBlocks(total) if isinstance(codec, SignCodec) else _TernaryBlocks(total)
    block_size = BLOCK_CHUNKS * encoder.chunk
    tensor = 0  # the first tensor that the current block may overlap
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite values are refused below, by name
        for low in range(0, total, block_size):
            high = min(low + block_size, total)
            left = encoder.block(corrected[low:high], low)  # what this block's bytes leave out
            while offsets[tensor + 1] <= low:
                tensor += 1
            index = tensor
            while index < len(layout) and offsets[index] < high:
                begin, finish = max(offsets[index], low), min(offsets[index + 1], high)
                outputs[index][begin - offsets[index]:finish - offsets[index]] = left[begin - low:finish - low]
                index += 1

    if not encoder.finite():  # a chunk's mean is finite exactly when all its values are
        for (name, _), offset, size in zip(layout, offsets, sizes):
            if not np.isfinite(corrected[offset:offset + size]).all():
                raise CodecError(f"{name!r} has NaN or infinite values")
    return header + encoder.payload()


class _Blocks:
    """Scratch arrays of one block, and the chunk sums both codecs take (fixed tree, in float64)."""

    chunk: int

    def __init__(self, total: int) -> None:
        size = BLOCK_CHUNKS * self.chunk
        self.total = total
        self.chunks = -(-total // self.chunk)
        self.scratch = _workspace.array("block values", np.float32, size)
        self.spare_values = _workspace.array("block spare values", np.float32, size)
        self.level = _workspace.array("block tree", np.float64, size // 2)
        self.spare = _workspace.array("block tree level", np.float64, size // 4)
        self.flags = _workspace.array("block flags", np.bool_, size)
        self.more_flags = _workspace.array("block more flags", np.bool_, size)
        self.decoded = _workspace.array("block decoded", np.float32, size)
        self.bits = _workspace.array("block bits", np.uint32, size)

    def shape(self, count: int) -> tuple[int, int, np.ndarray]:
        """Full chunks, the length of a last partial chunk, and each chunk's length (float64)."""
        full, tail = divmod(count, self.chunk)
        lengths = np.full(full + (1 if tail else 0), self.chunk, dtype=np.float64)
        if tail:
            lengths[-1] = tail
        return full, tail, lengths

    def chunk_sums(self, values: np.ndarray) -> np.ndarray:
        """Per chunk of `values` (float32 >= 0), the last one padded with zeros: their float64 sum."""
        full, tail = divmod(len(values), self.chunk)
        chunks = full + (1 if tail else 0)
        rows = self.level[:chunks * self.chunk // 2].reshape(chunks, self.chunk // 2)
        whole = values[:full * self.chunk].reshape(full, self.chunk)
        np.add(whole[:, 0::2], whole[:, 1::2], out=rows[:full], dtype=np.float64)
        if tail:
            last = np.zeros(self.chunk, dtype=np.float32)
            last[:tail] = values[full * self.chunk:]
            np.add(last[0::2], last[1::2], out=rows[full], dtype=np.float64)
        return fixed_tree_sum(rows, self.spare)

    def chunk_counts(self, flags: np.ndarray) -> np.ndarray:
        """Per chunk, how many flags are set (float64). The reference sums them as 0.0/1.0 in its float64 tree:
        whole numbers below 2**53, so an integer count is the same value."""
        full, tail = divmod(len(flags), self.chunk)
        counts = np.empty(full + (1 if tail else 0), dtype=np.float64)
        counts[:full] = np.count_nonzero(flags[:full * self.chunk].reshape(full, self.chunk), axis=1)
        if tail:
            counts[full] = np.count_nonzero(flags[full * self.chunk:])
        return counts

    def spread(self, per_chunk: np.ndarray, count: int) -> np.ndarray:
        """Each chunk's value repeated over the chunk's values (into the decoded scratch)."""
        full = count // self.chunk
        out = self.decoded[:count]
        out[:full * self.chunk].reshape(full, self.chunk)[:] = per_chunk[:full, None]
        if count > full * self.chunk:
            out[full * self.chunk:] = per_chunk[full]
        return out


class _SignBlocks(_Blocks):
    """`quantize.SignCodec`: per chunk the mean magnitude, per value its sign."""

    chunk = SIGN_CHUNK

    def __init__(self, total: int) -> None:
        super().__init__(total)
        self.scales = np.empty(self.chunks, dtype=np.float32)
        self.packed = np.empty(-(-total // 8), dtype=np.uint8)

    def block(self, values: np.ndarray, low: int) -> np.ndarray:
        count = len(values)
        _, _, lengths = self.shape(count)
        magnitudes = np.abs(values, out=self.scratch[:count])
        scales = (self.chunk_sums(magnitudes) / lengths).astype(np.float32)
        self.scales[low // self.chunk:low // self.chunk + len(scales)] = scales
        negative = np.less(values, 0, out=self.flags[:count])
        self.packed[low // 8:low // 8 + -(-count // 8)] = np.packbits(negative, bitorder="little")
        sent = self.spread(scales, count)
        _set_sign_bits(sent, negative, self.bits[:count])
        return np.subtract(values, sent, out=self.scratch[:count])

    def finite(self) -> bool:
        return bool(np.isfinite(self.scales).all())

    def payload(self) -> bytes:
        return self.scales.astype("<f4").tobytes() + self.packed.tobytes()


class _TernaryBlocks(_Blocks):
    """`ternary.TernaryCodec`: values above 3/4 of their chunk's mean magnitude are sent as sign times the mean
    magnitude of those sent; the signs of the sent values follow the bitmap, packed across all blocks."""

    chunk = TERNARY_CHUNK

    def __init__(self, total: int) -> None:
        super().__init__(total)
        self.thresholds = np.empty(self.chunks, dtype=np.float32)
        self.scales = np.empty(self.chunks, dtype=np.float32)
        self.packed = np.empty(-(-total // 8), dtype=np.uint8)
        self.signs = np.empty(total, dtype=np.bool_)  # of the sent values, in order
        self.sent_count = 0

    def block(self, values: np.ndarray, low: int) -> np.ndarray:
        count = len(values)
        _, _, lengths = self.shape(count)
        first = low // self.chunk
        magnitudes = np.abs(values, out=self.scratch[:count])
        thresholds = (self.chunk_sums(magnitudes) * TERNARY_THRESHOLD / lengths).astype(np.float32)
        self.thresholds[first:first + len(thresholds)] = thresholds
        sent = np.greater(magnitudes, self.spread(thresholds, count), out=self.flags[:count])
        # Masked numpy copies take ~15x longer than arithmetic here: a magnitude (>= 0, finite) times 1.0 or 0.0
        # is exactly it or +0.0, what `np.where(sent, magnitudes, 0)` gives.
        as_float = self.spare_values[:count]
        np.multiply(magnitudes, sent, out=as_float)
        sums = self.chunk_sums(as_float)
        counts = self.chunk_counts(sent)
        scales = np.where(counts > 0, sums / np.maximum(counts, 1.0), 0.0).astype(np.float32)
        self.scales[first:first + len(scales)] = scales
        self.packed[low // 8:low // 8 + -(-count // 8)] = np.packbits(sent, bitorder="little")

        negative = np.less(values, 0, out=self.more_flags[:count])
        taken = np.compress(sent, negative)
        self.signs[self.sent_count:self.sent_count + len(taken)] = taken
        self.sent_count += len(taken)

        decoded = self.spread(scales, count)  # s (>= 0) where sent, +0.0 elsewhere, then the sign bit where sent
        np.multiply(decoded, sent, out=decoded)
        np.logical_and(negative, sent, out=negative)
        _set_sign_bits(decoded, negative, self.bits[:count])
        return np.subtract(values, decoded, out=self.scratch[:count])

    def finite(self) -> bool:
        return bool(np.isfinite(self.thresholds).all())

    def payload(self) -> bytes:
        return (self.scales.astype("<f4").tobytes() + self.packed.tobytes()
                + np.packbits(self.signs[:self.sent_count], bitorder="little").tobytes())
