"""A worker's whole round in one call: train with checkpoints, then encode the pseudo-gradient.

The same training, checkpoints and encoding as `trolly-worker`'s round (`compute.worker.round_training`, which adds
the blob store, the saved progress and resuming; that is what `benchmarks/worker_overhead.py` times), without
any files: `simulate_diloco` strings rounds of it together for several workers in one process (benchmarks,
tests, demos), with the same outer step every party computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch

from .checkpoints import HashedCheckpoint
from .codecs import ErrorFeedback, get_codec
from .outer_step import GlobalState, aggregate_round
from .training import RoundResult, Trainer, run_round


@dataclasses.dataclass(frozen=True)
class EncodedRound:
    result: RoundResult
    encoded_update: bytes  # the blob whose sha256 is update_hash
    sent_update: dict[str, torch.Tensor]  # what the encoded bytes decode to


def train_and_encode(trainer: Trainer, feedback: ErrorFeedback, start_weights: Mapping[str, torch.Tensor], *,
                     worker_index: int, round_index: int, steps: int,
                     sink: Callable[[HashedCheckpoint, bytes], None] | None = None) -> EncodedRound:
    result = run_round(trainer, start_weights, worker_index=worker_index, round_index=round_index, steps=steps, sink=sink)
    encoded, sent = feedback.encode(result.pseudo_gradient)
    return EncodedRound(result=result, encoded_update=encoded, sent_update=sent)


@dataclasses.dataclass
class SimulationLog:
    bytes_sent_per_worker: list[int]
    rounds_done: int = 0


def simulate_diloco(trainer: Trainer, start: GlobalState, *, workers: int, rounds: int, steps: int,
                    on_round: Callable[[GlobalState], None] | None = None) -> tuple[GlobalState, SimulationLog]:
    """Run `rounds` DiLoCo rounds of `workers` workers (one after another on one trainer) and return the
    final global state and the encoded bytes each worker sent."""
    codec = get_codec(trainer.spec.codec)
    feedbacks = [ErrorFeedback(codec) for _ in range(workers)]
    log = SimulationLog(bytes_sent_per_worker=[0] * workers)
    state = start
    for round_index in range(start.round, start.round + rounds):
        updates = []
        for worker_index in range(workers):
            encoded = train_and_encode(trainer, feedbacks[worker_index], state.weights, worker_index=worker_index,
                                       round_index=round_index, steps=steps)
            log.bytes_sent_per_worker[worker_index] += len(encoded.encoded_update)
            updates.append((worker_index, encoded.result.samples_processed, encoded.encoded_update))
        state = aggregate_round(state, updates, trainer.spec)  # what the bytes decode to, as a remote party does
        log.rounds_done += 1
        if on_round is not None:
            on_round(state)
    return state, log
