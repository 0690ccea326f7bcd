"""Leaving a finished task tidy: its round blobs are deleted, its final weights and its dataset are kept.

While a task runs, a worker keeps every checkpoint it made (a verifier may ask for any sampled segment), every
update (members rebuild W_r from them), the global weights of each round and its error-feedback residuals.
Once the task has ended on chain, none of that can be asked for any more; checkpoints of a large model are
most of the disk a worker uses, so they go. The final weights stay (requesters download them by hash) and so
does the dataset (the next task on it needs no rebuild). A blob another task's progress still names is never
deleted: the store is content-addressed, so two tasks can share one.
"""

from __future__ import annotations

import shutil

from ..blobs import BlobStore
from .round_training import ResidualStore
from .progress import TaskProgress, WorkerState


def round_blobs(progress: TaskProgress) -> set[str]:
    """Every blob a task's progress names, except its final weights."""
    names = set(progress.global_states.values())
    for round_progress in progress.rounds.values():
        names.update(round_progress.checkpoints)
        names.update(h for h in (round_progress.update_hash, round_progress.residual_hash) if h)
    return names


def prune_task(store: BlobStore, state: WorkerState, task_id: int,
               residuals: ResidualStore | None = None) -> tuple[int, int]:
    """Delete a finished task's round blobs and checkpoint listings; returns (blobs deleted, bytes freed).
    `residuals`: the worker's residual store, waited for first, so that the progress names all that must stay."""
    if residuals is not None:
        residuals.wait()
    progress = state.task(task_id)
    keep = {progress.final_weights_hash}
    for other in state.tasks.values():
        if other.task_id != task_id:
            keep |= round_blobs(other) | {other.final_weights_hash}
    deleted = freed = 0
    for digest in sorted(round_blobs(progress) - keep):
        path = store.path(digest)
        if path.is_file():
            freed += path.stat().st_size
            path.unlink()
            deleted += 1
    shutil.rmtree(store.root / "tasks" / str(task_id), ignore_errors=True)
    return deleted, freed
