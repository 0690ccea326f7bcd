"""The built-in cheats: one per way of faking a round that the verifier must catch.

Per-segment cheats fake the segments in `context.faked_segments` and train the others honestly; whole-round
cheats (copying, replaying, inflated claims, forged or hostile blobs) fake every segment. Each description
says what the cheater does; a worker started with `--cheat NAME` fakes every segment it can.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import torch

from ..checkpoints import TrainingState, weights_hash
from ..errors import CheatError
from ..training import segment_bounds
from .distortions import cheat_steps, forge_counters, mix_states
from .registry import CheatContext, CheatedRound, honest_round, register_cheat, segment_cheat

def _bounds(context: CheatContext, segment: int) -> tuple[int, int]:
    return segment_bounds(segment, context.steps, context.spec.training.checkpoint_every)


def _skip(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, train_steps=max(0, (end - begin) // 2))


def _interpolate(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    # Fang et al. 2023: train the stretch cheaply (one real step), then draw the checkpoint on the straight
    # line through it, as far as the segment's length would have gone.
    one_step = cheat_steps(context, begin, begin + 1)
    return mix_states(start, one_step, float(end - begin), end)


def _half_batch(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, batch_fraction=0.5)


def _other_data(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, test_data=True)


def _bf16(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, autocast_dtype=torch.bfloat16)


def _fp16(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, autocast_dtype=torch.float16)


def _learning_rate(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, lr_scale=2.0)


def _random_weights(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    _, end = _bounds(context, segment)
    # No training at all: noise of the size of an honest update around the start weights.
    scale = context.spec.training.inner_optimizer.lr * (end - start.step)
    weights = {name: tensor + scale * torch.randn(tensor.shape, generator=context.generator, dtype=tensor.dtype)
               for name, tensor in start.weights.items()}
    return forge_counters(TrainingState(end, weights, start.optimizer), end)


def _withheld(context: CheatContext, segment: int, start: TrainingState) -> TrainingState:
    begin, end = _bounds(context, segment)
    return cheat_steps(context, begin, end, train_steps=0)


for _name, _fake, _description in (
    ("skipped_steps", _skip, "faked segments train only the first half of their steps"),
    ("interpolated", _interpolate, "faked checkpoints drawn on the line through one real step (Fang et al. 2023)"),
    ("half_batch", _half_batch, "faked segments train on half of each batch"),
    ("other_data", _other_data, "faked segments train on the test split instead of the prescribed batches"),
    ("bf16", _bf16, "faked segments computed in bfloat16 autocast"),
    ("fp16", _fp16, "faked segments computed in float16 autocast"),
    ("changed_lr", _learning_rate, "faked segments trained with twice the spec's learning rate"),
    ("random_weights", _random_weights, "faked checkpoints are random noise of an update's size, no training"),
):
    register_cheat(_name, _description)(segment_cheat(_fake))


@register_cheat("withheld", "faked segments are not trained and their end checkpoint is never served")
def withheld(context: CheatContext) -> CheatedRound:
    faked = segment_cheat(_withheld)(context)
    return dataclasses.replace(faked, withheld=frozenset(segment + 1 for segment in context.faked_segments))


@register_cheat("fewer_steps", "trains the first half of the round, claims all of it (later checkpoints repeat)")
def fewer_steps(context: CheatContext) -> CheatedRound:
    first_faked = context.segments - max(1, context.segments // 2)
    honest = honest_round(dataclasses.replace(context, steps=_bounds(context, first_faked)[0] or 1))
    checkpoints = list(honest.checkpoints[: first_faked + 1])
    for segment in range(first_faked, context.segments):
        checkpoints.append(forge_counters(checkpoints[-1], _bounds(context, segment)[1]))
    spec = context.spec
    return CheatedRound(tuple(checkpoints), context.steps, context.steps * spec.training.batch_size,
                        honest.start_weights_hash, frozenset(range(first_faked, context.segments)), codec=spec.codec)


@register_cheat("inflated_samples", "trains honestly but claims twice the samples it processed")
def inflated_samples(context: CheatContext) -> CheatedRound:
    honest = honest_round(context)
    return dataclasses.replace(honest, samples_processed=2 * honest.samples_processed,
                               faked_segments=frozenset(range(context.segments)))


@register_cheat("copied_update", "copies another worker's whole round (checkpoints and claims)")
def copied_update(context: CheatContext) -> CheatedRound:
    if context.other_worker_round is None:
        raise CheatError("copied_update needs another worker's round (context.other_worker_round)")
    other = context.other_worker_round()
    return dataclasses.replace(other, faked_segments=frozenset(range(context.segments)))


@register_cheat("replayed_round", "re-serves its own previous round's checkpoints, claiming this round's start")
def replayed_round(context: CheatContext) -> CheatedRound:
    if context.earlier_round is None:
        raise CheatError("replayed_round needs the worker's previous round (context.earlier_round)")
    earlier = context.earlier_round()
    # Claim the current round's start weights, so the round's agreement on W_r is not disturbed.
    return dataclasses.replace(earlier, start_weights_hash=honest_start_hash(context),
                               faked_segments=frozenset(range(context.segments)))


@register_cheat("forged_update", "trains every segment honestly but publishes another update than its checkpoints give")
def forged_update(context: CheatContext) -> CheatedRound:
    honest = honest_round(context)
    # The update says what the worker wants the aggregate to move by: here, a different payload under the same
    # framing (a real cheater might send a stale, amplified or another worker's update). Only the update check
    # (verifier/update_check.py) can see it: every segment replays bit for bit.
    return dataclasses.replace(honest, forge_update=_altered_update,
                               faked_segments=frozenset(range(context.segments)))


def _altered_update(data: bytes) -> bytes:
    altered = bytearray(data)
    altered[-1] ^= 0x01  # the payload's last byte: still a well-formed update, decoding to other values
    return bytes(altered)


def honest_start_hash(context: CheatContext) -> bytes:
    return weights_hash(context.start_weights)



@register_cheat("garbage_blobs", "trains honestly, then serves and commits hostile blobs that only decoding exposes")
def garbage_blobs(context: CheatContext) -> CheatedRound:
    honest = honest_round(context)
    # Checkpoints declaring 2^31 elements, truncated, of the wrong shapes, and an update that does not decode:
    # every hash matches its commitment, so only decoding them finds out. Honest workers and verifiers must
    # turn that into a verdict against the cheater, never into a crash.
    return dataclasses.replace(honest, forge_checkpoint=_garbage_checkpoint, forge_update=_garbage_update,
                               faked_segments=frozenset(range(context.segments)))


def _garbage_checkpoint(index: int, data: bytes) -> bytes:
    """Hostile canonical bytes in place of checkpoint `index`, a different kind per index."""
    name = b"weights/layers.0.weight"
    entry = struct.pack("<H", len(name)) + name
    kinds = (
        b"TRLT" + struct.pack("<BI", 1, 1) + entry + struct.pack("<BBQ", 1, 1, 2**31),  # 2^31 floats, no data
        b"TRLT" + struct.pack("<BI", 1, 1) + entry + struct.pack("<BBQQ", 1, 2, 0, 7),  # a zero dimension
        b"TRLT" + struct.pack("<BI", 1, 2**32 - 1),  # a forged tensor count, nothing after it
        b"TRLT" + struct.pack("<BI", 1, 1) + entry + struct.pack("<BBQ", 1, 1, 3) + b"\x00" * 12,  # wrong shape
        b"not a checkpoint at all " + bytes([index % 256]),
    )
    return kinds[index % len(kinds)]


def _garbage_update(data: bytes) -> bytes:
    """A well-framed update header announcing 2^31 values, with no payload."""
    header = b"TRCU" + struct.pack("<BB", 1, len(b"fp32")) + b"fp32" + struct.pack("<I", 1)
    return header + struct.pack("<H", 1) + b"x" + struct.pack("<BQ", 1, 2**31)


@register_cheat("arbitrary_start", "trains every segment honestly, but from weights of its own choosing (not the "
                "round's global weights), and commits their hash as its start")
def arbitrary_start(context: CheatContext) -> CheatedRound:
    # Weights a worker might prefer to the aggregate: here the round's start nudged by noise of an update's
    # size. Every segment replays bit for bit from them; only a verifier that derives W_r itself sees it.
    scale = context.spec.training.inner_optimizer.lr
    chosen = {name: tensor + scale * torch.randn(tensor.shape, generator=context.generator, dtype=tensor.dtype)
              for name, tensor in context.start_weights.items()}
    played = honest_round(dataclasses.replace(context, start_weights=chosen))
    return dataclasses.replace(played, faked_segments=frozenset(range(context.segments)))


def _forged_final_hash(true_hash: bytes) -> bytes:
    """The final weights hash a forger reports: any hash but the true one."""
    return hashlib.sha256(b"trolly/forged-final/" + true_hash).digest()


register_cheat("forged_final", "trains every round honestly, then reports final weights of its own choosing",
               final=_forged_final_hash)(honest_round)
