"""How much training `task submit --data` buys for a table: inner steps and rounds sized to the data, counted in
epochs over its train split.

A worker trains `inner_steps` steps of `batch_size` samples a round, so a task of `rounds` rounds passes over the
train split

    epochs = rounds x inner_steps x batch_size / train samples

times per worker (each worker draws its own batches from the whole split; more workers see more samples, not
fewer epochs each). By default a task trains `TableTraining.epochs` epochs and at least `min_steps` steps: a
table of a million rows converges in a few passes, one of a few hundred rows is a few steps an epoch and needs
many; `--epochs` sets the epochs instead. The steps are cut into rounds of at most `round_steps` inner steps and
at least `min_rounds` rounds (the outer optimizer averages the workers once a round), within the chain's bounds
(`MarketParams`: `max_rounds`, and `max_segments_per_round` segments of `checkpoint_every` steps a round); a
budget beyond them is refused with the most epochs the table can have.

`TABLE_TRAINING`, the MLP, learning rate, batch size and epochs a table is trained with by default, is chosen
from `benchmarks.quality`'s sweep (docs/performance.md, "Model quality"), which trains through these functions.
"""

from __future__ import annotations

import dataclasses
import math

from trolly.chain.market.params import MarketParams
from trolly.chain.market.spec import MAX_CHECKPOINT_EVERY

from ..errors import SpecError
from ..spec import example_spec

CHAIN_BOUNDS = MarketParams()
"""The bounds a budget is checked against offline: the chain's default market params (the chain's own check,
when the task is submitted, is the final word)."""


@dataclasses.dataclass(frozen=True)
class TableTraining:
    """What a table's default task trains: an MLP of `hidden` layers, AdamW at `lr` on batches of `batch_size`
    (with the inner lr `schedule`: constant, or cosine down to a tenth of `lr`), for `epochs` epochs and at least
    `min_steps` steps, in rounds of at most `round_steps` inner steps and at least `min_rounds` rounds; AdamW's
    `weight_decay`; and the outer Nesterov step over the workers' averaged updates, `outer_lr` and
    `outer_momentum` (lr 1 and momentum 0 is plain averaging of the workers' weights)."""

    hidden: tuple[int, ...] = (128,)
    lr: float = 0.001
    batch_size: int = 32
    epochs: float = 20.0
    min_steps: int = 300
    round_steps: int = 100
    min_rounds: int = 4
    schedule: str = "cosine"
    weight_decay: float = 0.0
    outer_lr: float = 1.0
    outer_momentum: float = 0.0


TABLE_TRAINING = TableTraining()
"""The defaults, measured by `benchmarks.quality` (docs/performance.md, "Model quality")."""
IMAGE_TRAINING = dataclasses.replace(TABLE_TRAINING, hidden=(), lr=0.001, weight_decay=0.0, schedule="constant",
                                     outer_lr=0.7, outer_momentum=0.9)
"""A CNN's on images: the optimizer of the example spec (`compute.spec.example_spec`), which `benchmarks.quality`'s
tables do not measure, for the same budget of epochs."""


@dataclasses.dataclass(frozen=True)
class Budget:
    """A task's length: `rounds` rounds of `inner_steps` steps of `batch_size` samples, over `train_samples`."""

    train_samples: int
    batch_size: int
    rounds: int
    inner_steps: int

    @property
    def steps(self) -> int:
        """Each worker's steps over the whole task."""
        return self.rounds * self.inner_steps

    @property
    def epochs(self) -> float:
        """Each worker's passes over the train split."""
        return self.steps * self.batch_size / self.train_samples

    @property
    def steps_per_epoch(self) -> float:
        return self.train_samples / self.batch_size

    def describe(self) -> str:
        return (f"{self.epochs:.3g} epochs ({self.rounds} rounds x {self.inner_steps} steps of {self.batch_size}, "
                f"each worker's passes over {self.train_samples} train rows)")


def max_inner_steps(checkpoint_every: int = MAX_CHECKPOINT_EVERY) -> int:
    """The most inner steps a round may have: the chain's segments per round, `checkpoint_every` steps each."""
    return CHAIN_BOUNDS.max_segments_per_round * checkpoint_every


def budget_for(train_samples: int, batch_size: int, epochs: float | None = None, rounds: int | None = None,
               training: TableTraining = TABLE_TRAINING,
               checkpoint_every: int = MAX_CHECKPOINT_EVERY) -> Budget:
    """The rounds and inner steps that train `epochs` epochs (default: `training`'s epochs and at least its
    `min_steps` steps) of `train_samples` rows at `batch_size`, over `rounds` rounds if given; refused when
    `epochs` is not a positive number or the budget does not fit the chain's bounds."""
    if train_samples < 1 or batch_size < 1:
        raise SpecError(f"a budget needs train rows and a batch size, got {train_samples} and {batch_size}")
    if epochs is not None and not (isinstance(epochs, (int, float)) and math.isfinite(epochs) and epochs > 0):
        raise SpecError(f"--epochs must be a positive number of passes over the train split, got {epochs!r}")
    if rounds is not None and not 1 <= rounds <= CHAIN_BOUNDS.max_rounds:
        raise SpecError(f"--rounds must be 1..{CHAIN_BOUNDS.max_rounds} (the chain's max_rounds), got {rounds}")
    per_epoch = train_samples / batch_size
    steps = (math.ceil(epochs * per_epoch) if epochs is not None
             else max(training.min_steps, math.ceil(training.epochs * per_epoch)))
    most = max_inner_steps(checkpoint_every)
    if rounds is None:
        rounds = min(CHAIN_BOUNDS.max_rounds, steps, max(training.min_rounds, math.ceil(steps / training.round_steps)))
    inner_steps = math.ceil(steps / rounds)
    if inner_steps > most:
        limit = rounds * most * batch_size / train_samples
        asked = f"{epochs:g} epochs" if epochs is not None else "the default budget"
        raise SpecError(f"{asked} of {train_samples} train rows at batch {batch_size} is {steps} steps per worker, "
                        f"more than the chain allows over {rounds} rounds ({most} steps a round: "
                        f"max_segments_per_round {CHAIN_BOUNDS.max_segments_per_round} x checkpoint_every "
                        f"{checkpoint_every}): ask for at most {limit:.4g} epochs"
                        + ("" if rounds == CHAIN_BOUNDS.max_rounds else " or more rounds"))
    return Budget(train_samples, batch_size, rounds, inner_steps)


def budget_of(training_section: dict, train_samples: int) -> Budget:
    """The budget a spec document's `training` section gives `train_samples` rows."""
    return Budget(train_samples, training_section["batch_size"], training_section["rounds"],
                  training_section["inner_steps"])


def table_spec(manifest_hash: str, arch: str, config: dict, budget: Budget, codec: str,
               training: TableTraining = TABLE_TRAINING) -> dict:
    """The spec document of a table's task: `arch` with `config`, `budget`'s rounds and steps, `training`'s
    optimizer, `codec` (its dataset section is set by the caller)."""
    inner = {"name": "adamw", "lr": training.lr, "weight_decay": training.weight_decay}
    if training.schedule == "cosine":
        inner["schedule"] = {"name": "cosine", "final_lr": training.lr / 10}
    outer = {"name": "nesterov", "lr": training.outer_lr, "momentum": training.outer_momentum}
    document = example_spec(manifest_hash, model={"arch": arch, "config": config}, codec=codec)
    document["training"].update(rounds=budget.rounds, inner_steps=budget.inner_steps, batch_size=budget.batch_size,
                                checkpoint_every=min(MAX_CHECKPOINT_EVERY, budget.inner_steps), inner_optimizer=inner,
                                outer_optimizer=outer)
    return document
