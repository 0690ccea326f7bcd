"""TEST SWITCH ONLY: deliberately dishonest training strategies, for showing that cheaters get caught.

`trolly-worker start --cheat NAME` swaps the honest strategy for one of these. They exist so that the
localnet and the end-to-end tests can run a worker that cheats the way a real one might, and check that the
verifiers catch it and the chain slashes it. A worker running one of them loses its collateral; nothing here
is useful to an operator.

    skip-steps   in every segment, trains only the first half of the steps and claims all of them: the
                 checkpoint's step count and AdamW counters are forged to the segment's end, so only the
                 numbers give it away. Saves half the compute; any replayed segment comes out different, so
                 every sampled segment exposes it. (`skipped_steps` is the same cheat under the name the
                 verifier's registry, `trolly.verifier.cheats`, gives it.)

    forged-update  trains every segment honestly but publishes another update than its checkpoints give
                 (the bytes altered; `forged_update` in the verifier's registry): every replay passes, the
                 update check (`trolly.verifier.update_check`) fails every vote on the round.
    garbage-blobs  trains honestly, then serves and commits hostile blobs instead: checkpoints declaring 2^31
                 elements, truncated, of the wrong shapes, and an update that does not decode. Every hash
                 matches its commitment, so only decoding them finds out: honest workers and verifiers must
                 turn that into a verdict against it, never into a crash.

The verifier package keeps the full registry of cheats for its benchmark; compute may not import it (DESIGN
section 1), so the strategies a worker process can run are defined here, faking every segment of a round.
"""

from __future__ import annotations

import struct

import torch

from ..checkpoints import TrainingState, final_state
from ..training import Trainer
from .errors import WorkerError
from .strategies import TrainingStrategy


class SkipSteps(TrainingStrategy):
    name = "skip-steps"
    honest = False

    def train_segment(self, trainer: Trainer, *, worker_index: int, round_index: int, end_step: int,
                      final: bool = False) -> TrainingState:
        begin = trainer.step
        self.advance(trainer, worker_index=worker_index, round_index=round_index,
                     end_step=begin + (end_step - begin) // 2)
        forged = forge_counters(trainer.snapshot(), end_step)  # the lie: steps that were never run
        trainer.load(forged)  # carry on from the checkpoint as published
        return final_state(forged) if final else forged


def forge_counters(state: TrainingState, step: int) -> TrainingState:
    """The same numbers labelled as step `step` everywhere: the checkpoint's step and AdamW's counters."""
    optimizer = {name: {**slots, "step": torch.tensor(float(step), dtype=torch.float32)}
                 for name, slots in state.optimizer.items()}
    return TrainingState(step=step, weights=state.weights, optimizer=optimizer)


def _flip_last_byte(data: bytes) -> bytes:
    altered = bytearray(data)
    altered[-1] ^= 0x01  # still a well-formed update, decoding to other values
    return bytes(altered)


class ForgedUpdate(TrainingStrategy):
    name = "forged-update"
    honest = False
    alter_update = staticmethod(_flip_last_byte)


def _garbage_blob(index: int) -> bytes:
    """Hostile canonical bytes, a different kind per index."""
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


class GarbageBlobs(TrainingStrategy):
    name = "garbage-blobs"
    honest = False

    @staticmethod
    def alter_update(data: bytes) -> bytes:
        header = b"TRCU" + struct.pack("<BB", 1, len(b"fp32")) + b"fp32" + struct.pack("<I", 1)
        return header + struct.pack("<H", 1) + b"x" + struct.pack("<BQ", 1, 2**31)  # 2^31 values, no payload

    def published_checkpoints(self, store, checkpoints: list[str]) -> list[str]:
        # as many blobs as the round has checkpoints (the chain checks the count)
        return [store.put(_garbage_blob(index)) for index in range(len(checkpoints))]


CHEATS: dict[str, type[TrainingStrategy]] = {"skip-steps": SkipSteps, "skipped_steps": SkipSteps,
                                             "forged-update": ForgedUpdate, "forged_update": ForgedUpdate,
                                             "garbage-blobs": GarbageBlobs}


def resolve_strategy(cheat: str | None, step_delay: float = 0.0) -> TrainingStrategy:
    """The honest strategy, or the named test cheat."""
    if not cheat:
        return TrainingStrategy(step_delay)
    if cheat not in CHEATS:
        raise WorkerError(f"unknown cheat {cheat!r}; known: {', '.join(sorted(CHEATS))}")
    return CHEATS[cheat](step_delay)
