"""The update check: a committed update must be what the worker's committed checkpoints make it.

A worker commits `update_hash`, `checkpoint_root` (checkpoints 0..n of its round) and `residual_hash` (its
error-feedback residual after the update). With W_r the weights of checkpoint 0, W_end those of checkpoint
n and e the residual it committed in its previous round (zero in its first), the protocol fixes
(docs/protocol.md 2a and 4.4a):

    update   = codec.encode(W_r - W_end + e)          sha256 must be update_hash
    residual = (W_r - W_end + e) - codec.decode(update) canonical bytes, sha256 must be residual_hash

in float32, one elementwise operation at a time, which every machine computes bit for bit. So a worker whose
sampled segments are honest cannot publish any other update: the verifier recomputes both from the blobs
and compares hashes. No training is involved, so the check is cheap next to a replay; it runs once per
(worker, round) and its result stands for every sampled segment of that round (`UpdateChecks` keeps it).
A mismatch makes every vote on that worker's round FAIL; a blob the check needs that is not served makes
them UNAVAILABLE (as a withheld checkpoint does).

`expected_update` is the fast path (the worker's own, `codecs.fused.encode_with_feedback` into canonical
bytes); `expected_update_reference` spells the rule out with `ErrorFeedback` and `encode_tensors`, and the
tests compare the two.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
from collections.abc import Mapping

import torch

from trolly.compute.canonical import decode_entries, encode_tensors
from trolly.compute.canonical_copy import allocate_canonical
from trolly.compute.checkpoints import decode_checkpoint, weights_hash
from trolly.compute.codecs import Codec, ErrorFeedback
from trolly.compute.codecs.fused import Workspace, encode_with_feedback
from trolly.compute.errors import ComputeError
from trolly.compute.model_layout import ModelLayout, check_blob


@dataclasses.dataclass(frozen=True)
class UpdateVerdict:
    """The outcome of one (worker, round)'s update check: "pass", "fail", "unavailable" or "tampered"."""

    outcome: str
    reason: str


def expected_update(codec: Codec, start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor],
                    previous_residual: Mapping[str, torch.Tensor] | None, workspace: Workspace | None = None
                    ) -> tuple[bytes, memoryview]:
    """(the update's bytes, the new residual's canonical bytes), as the worker makes them; `workspace` holds
    the encoder's scratch between checks (None: fresh for this one)."""
    residual_bytes, residual = allocate_canonical(end)
    return encode_with_feedback(codec, start, end, previous_residual, residual, workspace), residual_bytes


def expected_update_reference(codec: Codec, start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor],
                              previous_residual: Mapping[str, torch.Tensor] | None) -> tuple[bytes, bytes]:
    """The same as `expected_update`, the plain way: the reference the fast path is tested against."""
    feedback = ErrorFeedback(codec)
    if previous_residual is not None:
        feedback.load_state(previous_residual)
    data, _ = feedback.encode({name: start[name] - end[name] for name in end})
    return data, encode_tensors(feedback.residual)


def judge_update(codec: Codec, layout: ModelLayout, *, first: bytes, last: bytes, previous_residual: bytes | None,
                 start_weights_hash: bytes, update_hash: bytes, residual_hash: bytes,
                 workspace: Workspace | None = None) -> UpdateVerdict:
    """Recompute the update and residual from checkpoint 0 (`first`), checkpoint n (`last`) and the previous
    residual's bytes (None: zero), all already hash-checked against the commitments, and compare."""
    if len(update_hash) != 32 or len(residual_hash) != 32:
        return UpdateVerdict("fail", "the commitment names no update or no residual (both are required)")
    try:
        # only read from here on (the encoding makes new tensors): views of the fetched bytes, no copies
        start = decode_checkpoint(first, layout, copy=False)
        end = decode_checkpoint(last, layout, copy=False)
        previous = None
        if previous_residual is not None:
            entries = check_blob(previous_residual, layout, "the previous round's residual")
            previous = decode_entries(previous_residual, entries, copy=False)
    except ComputeError as error:
        return UpdateVerdict("fail", f"a blob the update is computed from does not decode: {error}")
    if not end.final:
        return UpdateVerdict("fail", "the round's last checkpoint holds optimizer state; it must hold none")
    if weights_hash(start.weights) != start_weights_hash:
        return UpdateVerdict("fail", "checkpoint 0 does not hold the committed start weights")
    try:
        data, residual = expected_update(codec, start.weights, end.weights, previous, workspace)
    except ComputeError as error:  # e.g. non-finite weights: no honest round produces them
        return UpdateVerdict("fail", f"the committed checkpoints give no update: {error}")
    if hashlib.sha256(data).digest() != update_hash:
        return UpdateVerdict("fail", "the committed update is not the codec's encoding of W_r - W_end plus the "
                                     "previous residual (forged update)")
    if hashlib.sha256(residual).digest() != residual_hash:
        return UpdateVerdict("fail", "the committed residual is not what the update leaves out")
    return UpdateVerdict("pass", "the update and residual follow from the committed checkpoints")


class UpdateChecks:
    """Update-check results by (task, round, worker and every hash the check read), so that the sampled
    segments of one round share one check. Bounded: the oldest results go first.

    A check still running is shared too (`running`/`start`): the service verifies several segments at once,
    and two sampled segments of one worker's round that both reach the check before either has finished it
    wait for the one check instead of fetching its blobs and recomputing the update twice."""

    def __init__(self, size: int = 256, workspace: Workspace | None = None) -> None:
        self.workspace = workspace if workspace is not None else Workspace()
        """The encoder's scratch, kept from one check to the next (every round's update has the same size)."""
        self._results: collections.OrderedDict[tuple, UpdateVerdict] = collections.OrderedDict()
        self._running: dict[tuple, asyncio.Future] = {}
        self._size = size
        self.computed = 0

    def get(self, key: tuple) -> UpdateVerdict | None:
        return self._results.get(key)

    def running(self, key: tuple) -> asyncio.Future | None:
        """The check of `key` in progress on this event loop, if there is one."""
        future = self._running.get(key)
        if future is None or future.done() or future.get_loop() is not asyncio.get_running_loop():
            return None
        return future

    def start(self, key: tuple, future: asyncio.Future) -> None:
        """Record `future` as the check of `key` in progress until it is done."""
        self._running[key] = future
        future.add_done_callback(lambda done: self._running.pop(key, None) if self._running.get(key) is done else None)

    def clear(self) -> None:
        self._results.clear()

    def put(self, key: tuple, verdict: UpdateVerdict) -> None:
        if verdict.outcome in ("pass", "fail"):  # unavailability may heal: checked again next time
            self._results[key] = verdict
            while len(self._results) > self._size:
                self._results.popitem(last=False)
