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

The verifier package keeps the full registry of cheats for its benchmark; compute may not import it (DESIGN
section 1), so the strategies a worker process can run are defined here, faking every segment of a round.
"""

from __future__ import annotations

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


CHEATS: dict[str, type[TrainingStrategy]] = {"skip-steps": SkipSteps, "skipped_steps": SkipSteps}


def resolve_strategy(cheat: str | None, step_delay: float = 0.0) -> TrainingStrategy:
    """The honest strategy, or the named test cheat."""
    if not cheat:
        return TrainingStrategy(step_delay)
    if cheat not in CHEATS:
        raise WorkerError(f"unknown cheat {cheat!r}; known: {', '.join(sorted(CHEATS))}")
    return CHEATS[cheat](step_delay)
