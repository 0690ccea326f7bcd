"""Where a worker keeps the global weights it derived: in its blob store, named in the task's saved progress.

The states themselves come from the one follower of a task's weights (`compute/weights_follower.py`); this
cache makes them survive a restart with the rest of the worker's progress (`progress.py`), and lets the
housekeeping that prunes a finished task's blobs find them.
"""

from __future__ import annotations

from ..blobs import BlobStore
from ..errors import ComputeError
from ..outer_step import GlobalState
from .progress import TaskProgress, WorkerState


class ProgressCache:
    """A `weights_follower.StateCache` over the worker's blob store and one task's progress."""

    def __init__(self, store: BlobStore, state: WorkerState, progress: TaskProgress) -> None:
        self.store = store
        self.state = state
        self.progress = progress

    def load(self, round_index: int) -> GlobalState | None:
        digest = self.progress.global_states.get(round_index)
        if not digest or not self.store.has(digest):
            return None
        try:
            return GlobalState.decode(self.store.get(digest))
        except ComputeError:
            return None  # derived again, never trusted

    def save(self, state: GlobalState) -> None:
        digest = self.store.put(state.encode())
        with self.state.lock:
            self.progress.global_states[state.round] = digest
            self.state.save()
