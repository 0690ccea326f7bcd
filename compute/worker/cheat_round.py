"""TEST SWITCH ONLY: a worker's round played by a cheat from the registry (`compute.cheats`).

`trolly-worker start --cheat NAME` (and the localnet's `--cheat NAME`, which starts its worker-0 that way)
makes the worker play each round with the named cheat instead of training it honestly, so that the localnet
and the end-to-end tests can show the verifiers catching a cheater and the chain slashing it. The cheat is
the same function the verification benchmark measures; here it fakes every segment it can (the benchmark
fakes a third, to count detection per faked segment), so any sampled segment can expose it.

What the cheat publishes is stored and recorded in the round's progress as an honest round's would be
(checkpoint hashes, start weights hash, update and residual), except checkpoints it withholds, which are
never stored and so never served; the commitment carries its claims (`claimed_samples`). It plays its round
afresh after a restart: a cheat is a function of the round, so that gives the same bytes.

A cheat that copies another worker's round copies the honest round of the next worker index, trained here
from the same start (what that worker would commit); one that replays its own previous round re-serves the
checkpoints it recorded for it. In a first round there is none: the cheat cannot play that round
(`CheatError`), and the service trains it honestly instead, saying so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import torch

from ..blobs import BlobStore
from ..canonical import decode_tensors
from ..cheats import Cheat, CheatContext, CheatedRound, honest_round
from ..spec import TaskSpec
from ..training import Trainer
from .round_training import TrainedRound, load_checkpoint
from .progress import RoundProgress, TaskProgress, WorkerState

log = logging.getLogger("trolly.worker")


def play_cheat_round(cheat: Cheat, trainer: Trainer, store: BlobStore, state: WorkerState, task: TaskProgress,
                     round_index: int, *, start_weights: Mapping[str, torch.Tensor],
                     previous_residual_hash: str) -> TrainedRound:
    """Play round `round_index` of `task` (its steps already planned) with `cheat` from `start_weights`; store
    and record what it publishes (`previous_residual_hash`: the residual its update carries, '' for none).
    Raises `CheatError` when the cheat cannot play this round."""
    progress = task.round(round_index)
    context = CheatContext(trainer, start_weights, task.worker_index, round_index, progress.steps,
                           frozenset(range(trainer.spec.num_checkpoints(progress.steps) - 1)),
                           torch.Generator().manual_seed(1000 * round_index + task.worker_index),
                           earlier_round=_recorded_round(store, trainer.spec, task.rounds.get(round_index - 1)))
    context = dataclasses.replace(context, other_worker_round=lambda: honest_round(
        dataclasses.replace(context, worker_index=task.worker_index + 1)))
    cheated = cheat.play(context)
    previous = decode_tensors(store.get(previous_residual_hash)) if previous_residual_hash else None
    published = cheated.publish(previous)
    for data in published.blobs.values():  # withheld checkpoints are not among them: never stored, never served
        store.put(data)
    with state.lock:
        progress.start_weights_hash = cheated.start_weights_hash.hex()
        progress.checkpoints = list(published.listing)
        progress.update_hash = published.update_hash.hex()
        progress.residual_hash = published.residual_hash.hex()
        state.save()
    log.warning("task %d round %d: played by the cheat %s (TEST SWITCH)", task.task_id, round_index, cheat.name)
    return TrainedRound(list(published.listing), None, claimed_samples=cheated.samples_processed)


def _recorded_round(store: BlobStore, spec: TaskSpec, progress: RoundProgress | None):
    """A callable giving the round this worker recorded (its checkpoints read back from the store), or None
    when there is no such round or its checkpoints are gone."""
    if progress is None or not progress.checkpoints or not all(store.has(h) for h in progress.checkpoints):
        return None
    return lambda: CheatedRound(tuple(load_checkpoint(store, h) for h in progress.checkpoints), progress.steps,
                                progress.steps * spec.training.batch_size, bytes.fromhex(progress.start_weights_hash),
                                codec=spec.codec)
