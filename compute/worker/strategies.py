"""How a worker trains a segment: honestly, at the pace of the device it emulates.

The round loop (`training.train_round_segments`, which the worker's `rounds.train_round` runs) asks its
strategy for each segment in turn: "from where the trainer stands, train up to `end_step` and give me the
state". The strategy is exactly the verifier's `train_segment`, so a verifier replaying any segment gets the
same bytes. (A worker started with the `--cheat` test switch plays its rounds with a cheat from
`compute.cheats` instead: `cheat_round.py`.)

`step_delay` emulates a slower device (seconds slept after each inner step): the localnet's "slow" worker
and the restart test use it to make a round last long enough to watch or interrupt. It changes timing only,
never the bytes.
"""

from __future__ import annotations

import time

from ..checkpoints import DeferredSnapshot, TrainingState
from ..training import Trainer, train_segment


class TrainingStrategy:
    """Honest training, one step at a time with a pause after each when emulating a slower device."""

    def __init__(self, step_delay: float = 0.0) -> None:
        if step_delay < 0:
            raise ValueError("step_delay must be >= 0")
        self.step_delay = step_delay

    def advance(self, trainer: Trainer, *, worker_index: int, round_index: int, end_step: int,
                soon: bool = False, final: bool = False) -> TrainingState | DeferredSnapshot:
        """Honest steps up to `end_step` (one at a time when emulating a slow device); with `soon`, the state
        is copied beside the next steps (`Trainer.snapshot_soon`); with `final`, it is a round's last
        checkpoint (no optimizer state)."""
        if not self.step_delay:
            return train_segment(trainer, None, worker_index=worker_index, round_index=round_index, end_step=end_step,
                                 soon=soon, final=final)
        state = None
        while trainer.step < end_step:
            state = train_segment(trainer, None, worker_index=worker_index, round_index=round_index,
                                  end_step=trainer.step + 1, final=final and trainer.step + 1 == end_step)
            time.sleep(self.step_delay)
        return state if state is not None else trainer.snapshot(final)

    def train_segment(self, trainer: Trainer, *, worker_index: int, round_index: int,
                      end_step: int, final: bool = False) -> TrainingState | DeferredSnapshot:
        return self.advance(trainer, worker_index=worker_index, round_index=round_index, end_step=end_step, soon=True,
                            final=final)
