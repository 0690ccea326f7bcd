"""TEST SWITCH ONLY: deliberately dishonest training strategies, for showing that cheaters get caught.

`trolly-worker start --cheat NAME` swaps the honest strategy for one of these. They exist so that the
localnet and the end-to-end tests can run a worker that cheats the way a real one might, and check that the
verifiers catch it and the chain slashes it. A worker running one of them loses its collateral; nothing here
is useful to an operator.

    skip-steps   in every segment, trains only the first half of the steps and claims all of them (the
                 checkpoint says "step end" but holds the weights of half-way): saves half the compute, and
                 any replayed segment comes out different, so each sampled segment exposes it.

The verifier package keeps its own registry of cheat names (`trolly.verifier.cheats`); compute may not
import it (DESIGN section 1), so the strategies the worker can run are defined here under the same names.
"""

from __future__ import annotations

from ..checkpoints import TrainingState
from ..training import Trainer
from .errors import WorkerError
from .strategies import TrainingStrategy


class SkipSteps(TrainingStrategy):
    name = "skip-steps"
    honest = False

    def train_segment(self, trainer: Trainer, *, worker_index: int, round_index: int, end_step: int) -> TrainingState:
        begin = trainer.step
        trained_until = begin + max(1, -(-(end_step - begin) // 2))
        self.advance(trainer, worker_index=worker_index, round_index=round_index, end_step=min(trained_until, end_step))
        trainer.step = end_step  # the lie: the checkpoint claims steps that were never run
        return trainer.snapshot()


CHEATS: dict[str, type[TrainingStrategy]] = {cls.name: cls for cls in (SkipSteps,)}


def resolve_strategy(cheat: str | None, step_delay: float = 0.0) -> TrainingStrategy:
    """The honest strategy, or the named test cheat."""
    if not cheat:
        return TrainingStrategy(step_delay)
    if cheat not in CHEATS:
        raise WorkerError(f"unknown cheat {cheat!r}; known: {', '.join(sorted(CHEATS))}")
    return CHEATS[cheat](step_delay)
