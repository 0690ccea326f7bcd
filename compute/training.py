"""The inner loop: `train_segment`, used by the worker to train and by the verifier to replay.

A round (docs/protocol.md section 2) starts from the global weights W_r with a fresh AdamW and runs `steps`
inner steps; step s trains on `sample_batch(seed, worker, round, s)`. Every `checkpoint_every` steps the
state is checkpointed. A segment is the step range between two checkpoints; replaying it from checkpoint i
must give checkpoint i + 1 byte for byte under the same determinism profile.

    trainer = Trainer(spec, dataset)                          # model + AdamW, built once, reused
    state = train_segment(trainer, start_state, worker_index=0, round_index=3, end_step=20)

A round's loop, `train_round_segments`, is the one every round runs: the reference `run_round` (checkpoints
hashed in the background, the Merkle root, the pseudo-gradient), and the worker's `compute.worker.round_training.
train_round`, which adds its collaborators as parameters (the segment trainer of its strategy, the stop
check, resumption from a stored checkpoint, the progress display) and its acceleration.

This module is the protocol's core: it imports nothing of `compute.acceleration`, which speeds a worker's
rounds up behind two interfaces defined here and changes no byte. `RoundAcceleration` (`run_round`,
`train_round_segments`, `round_checkpoints`): batches drawn ahead, the training core, the round's checkpoint
queue. `SnapshotTaker` (`Trainer.snapshots_by`): who takes `snapshot_soon`'s snapshots instead of the trainer's
own copier thread, such as a checkpoint process reading the state where `Trainer.relocate_state` put it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

import torch
from torch.nn import functional

from trolly.chain.market.spec import WASM32_KERNEL

from .canonical_copy import BufferPool
from .checkpoints import (CheckpointHasher, CheckpointQueue, DeferredSnapshot, HashedCheckpoint, SnapshotCopier,
                          TrainingState, checkpoint_tensors, prepare_capture, weights_hash)
from .data.dataset import Dataset, sample_batch
from .determinism import apply_profile, flushing_subnormals
from .errors import CheckpointError, SpecError
from .memory import retain_freed_memory
from .checkpoint_merkle import merkle_root
from .models import build_model
from .portable_weights import portable_initial_weights
from .lr_schedule import inner_lr
from .spec import TaskSpec

if TYPE_CHECKING:
    from .blobs import BlobStore


def initial_weights(spec: TaskSpec, shape) -> dict[str, torch.Tensor]:
    """W_0: the model's initial weights, a pure function of the spec (architecture, config, seed). A task that
    allows the wasm32 kernel starts from the portable initialisation a browser computes to the same bits
    (`portable_weights.py`); every other from torch's, drawn under the seed."""
    if WASM32_KERNEL in spec.kernels:
        return portable_initial_weights(spec.model.arch, spec.model.config, shape, spec.training.seed)
    model = build_model(spec.model.arch, spec.model.config, shape, spec.training.seed)
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def fresh_adamw_slots(parameter: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state PyTorch's AdamW creates for `parameter` on its first step: a zero step count and zero moments."""
    return {"step": torch.zeros((), dtype=torch.float32, device=parameter.device),
            "exp_avg": torch.zeros_like(parameter),
            "exp_avg_sq": torch.zeros_like(parameter)}


def segment_bounds(segment: int, steps: int, checkpoint_every: int) -> tuple[int, int]:
    """Step range [start, end) of segment i of a round of `steps` steps."""
    start = segment * checkpoint_every
    if not 0 <= start < steps:
        raise SpecError(f"segment {segment} is outside a round of {steps} steps")
    return start, min(start + checkpoint_every, steps)


class PendingSnapshot(Protocol):
    """A snapshot still being taken while training goes on (`checkpoints.DeferredSnapshot`, or a taker's own)."""

    source_weights: Mapping[str, torch.Tensor]
    """The trainer's live weights, which the snapshot holds until the trainer's next change."""

    def wait(self) -> None:
        """Until the trainer may change its state again (the snapshot's data is copied, or taking it failed)."""


class SnapshotTaker(Protocol):
    """Takes `Trainer.snapshot_soon`'s snapshots instead of the trainer's copier thread, in the rounds it is
    handed in for (`Trainer.snapshots_by`): the worker's checkpoint process (`compute.acceleration`)."""

    def snapshot(self, step: int, source_weights: Mapping[str, torch.Tensor],
                 final: bool = False) -> PendingSnapshot:
        """A snapshot of the trainer's state as it is now, at `step` (`final`: a round's last, weights only)."""

    def close(self) -> None:
        """End whatever takes the snapshots, once what it was asked is done."""


class StateHome(Protocol):
    """Memory the trainer's weights and AdamW state live in instead of its own (`Trainer.relocate_state`)."""

    tensors: Mapping[str, torch.Tensor]
    """A tensor for each checkpoint name but "step" (`checkpoints.checkpoint_tensors`), of its dtype and shape."""


class Trainer:
    """A model and its AdamW built from a spec, kept alive so consecutive segments need no rebuild.

    Applies the spec's determinism profile when constructed (thread count, deterministic algorithms; refuses
    a mismatched instruction set) and runs on its device (`profile.device`: the model, its AdamW state and each
    batch there; checkpoints are still bytes in host memory), and keeps freed memory for reuse
    (`memory.retain_freed_memory`): both are process-wide.

    Owns what its snapshots need: the spare checkpoint buffers (`canonical_copy.BufferPool`) and the thread
    that copies `snapshot_soon`'s snapshots (`checkpoints.SnapshotCopier`, started at the first one), and the
    snapshot taker it was handed to keep (`keep_snapshot_taker`). `close()` ends that thread and the taker; so
    does dropping a trainer unclosed (the verifier keeps trainers without closing them).
    """

    def __init__(self, spec: TaskSpec, dataset: Dataset) -> None:
        self.spec = spec
        self.dataset = dataset
        self.profile_id = apply_profile(spec.determinism)
        retain_freed_memory()
        self.device = torch.device(spec.determinism.device)
        self.model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed).to(self.device)
        self.model.train()
        self.parameters = dict(self.model.named_parameters())
        inner = spec.training.inner_optimizer
        # The implementation is pinned, as the three give different bytes. Fused: one vectorised pass over
        # each parameter and its two moments instead of a dozen elementwise ops, much less time per
        # optimizer step on CPU; elementwise, so deterministic.
        self.optimizer = torch.optim.AdamW(
            self.parameters.values(), lr=inner.lr, betas=(inner.beta1, inner.beta2), eps=inner.eps,
            weight_decay=inner.weight_decay, foreach=False, fused=True,
        )
        self.step = 0
        self.samples = 0  # samples trained since the last load()
        self._copying: PendingSnapshot | None = None  # a snapshot still reading the model and optimizer
        self.batches_ahead: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        """Batches of (worker, round, step) drawn before their step (`compute.acceleration.batches_ahead`)."""
        self.state_home: StateHome | None = None  # where the weights and AdamW state live, once relocated
        self.snapshot_taker: SnapshotTaker | None = None  # kept with the trainer, see keep_snapshot_taker
        self._snapshots_by: SnapshotTaker | None = None  # set by snapshots_by()
        self._taker_finalizer: weakref.finalize | None = None  # ends the taker of a trainer never closed
        self.buffers = BufferPool()  # spare checkpoint buffers: this trainer's snapshots are all of one size
        self._copier = SnapshotCopier()
        weakref.finalize(self, self._copier.close)  # the copier's thread ends with a trainer never closed

    def load(self, state: TrainingState) -> None:
        """Make the model and optimizer exactly `state` (copies, the state is not aliased). Everything is
        checked before anything is changed, so a refused state leaves the trainer as it was."""
        self._wait_for_copy()
        own = self._checked_model_weights(state.weights)
        if set(state.optimizer) != set(self.parameters):
            raise CheckpointError("checkpoint optimizer state does not match the model's parameters")
        for name, parameter in self.parameters.items():
            slots = state.optimizer[name]
            if set(slots) != {"step", "exp_avg", "exp_avg_sq"} or slots["step"].numel() != 1 or any(
                    slots[moment].shape != parameter.shape for moment in ("exp_avg", "exp_avg_sq")):
                raise CheckpointError(f"optimizer state for {name!r} does not match the parameter")
        with torch.no_grad():
            for name, tensor in state.weights.items():
                own[name].copy_(tensor)
            self._load_optimizer(state)
        self.step = state.step
        self.samples = 0

    def start_round(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Round start: `weights`, step 0 and an AdamW that has not stepped, exactly what loading
        `TrainingState.fresh(weights)` gives, without building that state (checkpoint 0 is then taken with
        `snapshot_soon`, beside the first step)."""
        self._wait_for_copy()
        own = self._checked_model_weights(weights)
        with torch.no_grad():
            for name, tensor in weights.items():
                own[name].copy_(tensor)
            for parameter in self.parameters.values():
                slots = self.optimizer.state.get(parameter)
                if slots:
                    for slot in ("step", "exp_avg", "exp_avg_sq"):
                        slots[slot].zero_()
                else:
                    self.optimizer.state[parameter] = fresh_adamw_slots(parameter)
        self.step = 0
        self.samples = 0

    def _checked_model_weights(self, weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The model's state_dict, after checking that `weights` has the same names, shapes and dtypes."""
        own = self.model.state_dict()
        if set(weights) != set(own):
            raise CheckpointError("checkpoint weights do not match the model's parameters")
        for name, tensor in weights.items():
            if tensor.shape != own[name].shape or tensor.dtype != own[name].dtype:
                raise CheckpointError(f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)} {tensor.dtype}, "
                                      f"model has {tuple(own[name].shape)} {own[name].dtype}")
        return own

    def _load_optimizer(self, state: TrainingState) -> None:
        for name, parameter in self.parameters.items():
            slots = state.optimizer[name]
            own_slots = self.optimizer.state.get(parameter)
            # Relocated tensors stay where they are whatever the checkpoint's dtypes (copy_ converts).
            if own_slots and (self.state_home is not None or all(own_slots[m].dtype == slots[m].dtype
                                                             for m in ("exp_avg", "exp_avg_sq"))):
                # Overwrite the tensors AdamW already has: the same values as fresh clones, without
                # allocating (and page-faulting) the moments again at the start of every round.
                own_slots["step"].copy_(slots["step"].reshape(()))
                own_slots["exp_avg"].copy_(slots["exp_avg"])
                own_slots["exp_avg_sq"].copy_(slots["exp_avg_sq"])
                continue
            self.optimizer.state[parameter] = {
                "step": slots["step"].detach().to(parameter.device, torch.float32, copy=True).reshape(()),
                "exp_avg": slots["exp_avg"].detach().to(parameter.device, copy=True),
                "exp_avg_sq": slots["exp_avg_sq"].detach().to(parameter.device, copy=True),
            }

    def _optimizer_tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """The live AdamW state by parameter name ("step", "exp_avg", "exp_avg_sq"), created as the zeros of an
        optimizer that has not stepped (what AdamW itself creates on its first step) where it is missing."""
        self._wait_for_copy()
        tensors = {}
        for name, parameter in self.parameters.items():
            slots = self.optimizer.state.get(parameter)
            if not slots:
                slots = self.optimizer.state[parameter] = fresh_adamw_slots(parameter)
            tensors[name] = {slot: slots[slot] for slot in ("step", "exp_avg", "exp_avg_sq")}
        return tensors

    def relocate_state(self, make_home: Callable[[dict[str, torch.Tensor]], StateHome]) -> StateHome:
        """Move the weights and AdamW state into the tensors of `make_home(live)` (values unchanged; on first
        call, later calls return the same home) and return it; loads then convert into them instead of
        replacing them. How a checkpoint process comes to read them (`compute.acceleration.state_arena`)."""
        if self.state_home is not None:
            return self.state_home
        weights = self.model.state_dict()
        if set(weights) != set(self.parameters):
            raise CheckpointError("the model has buffers besides its parameters: its state cannot be moved")
        live = checkpoint_tensors(TrainingState(step=0, weights=weights, optimizer=self._optimizer_tensors()))
        del live["step"]
        home = make_home(live)
        with torch.no_grad():
            for name, tensor in live.items():
                home.tensors[name].copy_(tensor)
            for name, parameter in self.parameters.items():
                parameter.data = home.tensors[f"weights/{name}"]
                slots = self.optimizer.state[parameter]
                for slot in ("step", "exp_avg", "exp_avg_sq"):
                    slots[slot] = home.tensors[f"adamw/{name}/{slot}"]
        self.state_home = home
        return home

    def keep_snapshot_taker(self, taker: SnapshotTaker) -> None:
        """Keep `taker` with the trainer: closed by `close()`, or when another replaces it, or when the trainer
        is dropped unclosed. It takes snapshots only within `snapshots_by(taker)`."""
        if self.snapshot_taker is not None and self.snapshot_taker is not taker:
            self.close()
        self.snapshot_taker = taker
        # A trainer dropped without close() still ends its taker (a checkpoint process: its input closes, it exits).
        self._taker_finalizer = weakref.finalize(self, taker.close)

    @contextlib.contextmanager
    def snapshots_by(self, taker: SnapshotTaker | None,
                     keep_off: Callable[[], None] | None = None) -> Iterator[None]:
        """Within: `snapshot_soon` asks `taker` for the snapshot, if one is given; otherwise the copier thread
        copies it, calling `keep_off` first (the acceleration's `keep_off_training_core`: off the training core
        of a pinned round)."""
        self._snapshots_by = taker
        self._copier.keep_off = keep_off
        try:
            yield
        finally:
            self._snapshots_by = None
            self._copier.keep_off = None

    def close(self) -> None:
        """End the snapshot copier's thread and the kept snapshot taker, if they were started (the trainer stays
        usable: the next `snapshot_soon` starts a copier thread again)."""
        self._wait_for_copy()
        self._copier.close()
        if self.snapshot_taker is not None:
            self._taker_finalizer.detach()
            self.snapshot_taker.close()
            self.snapshot_taker = None

    def snapshot(self, final: bool = False) -> TrainingState:
        """A copy of the current state, safe to hand to another thread while training goes on. The copy is
        written straight into the checkpoint's canonical bytes (`checkpoints.capture`). `final`: the form of a
        round's last checkpoint, without the optimizer state (`checkpoints.final_state`)."""
        self._wait_for_copy()
        state, fill, _ = self._prepare_snapshot(final)
        fill()
        return state

    def snapshot_soon(self, final: bool = False) -> PendingSnapshot:
        """The same snapshot, its data copied on another thread while this one goes on with the next step's
        batch, forward and backward passes, which change nothing in it: the copy costs the training thread
        nothing unless it is not over by the next optimizer step, where `train_step` waits for it (a
        `DeferredSnapshot`). Within `snapshots_by(taker)` the taker takes it instead (and says what it returns)."""
        self._wait_for_copy()
        if self._snapshots_by is not None:
            self._copying = self._snapshots_by.snapshot(self.step, self.model.state_dict(), final=final)
            return self._copying
        state, fill, weights = self._prepare_snapshot(final)
        self._copying = DeferredSnapshot(state, fill, source_weights=weights, copier=self._copier)
        return self._copying

    def _wait_for_copy(self) -> None:
        if self._copying is not None:
            self._copying.wait()
            self._copying = None

    def _prepare_snapshot(self, final: bool) -> tuple[TrainingState, Callable[[], None], dict[str, torch.Tensor]]:
        """The snapshot's state (not yet filled in), the copy that fills it, and the live weights it copies."""
        optimizer = {}
        for name, parameter in ({} if final else self.parameters).items():
            slots = self.optimizer.state.get(parameter)
            if not slots:  # never stepped: the zeros AdamW would create
                optimizer[name] = fresh_adamw_slots(parameter)
            else:
                optimizer[name] = {slot: slots[slot] for slot in ("step", "exp_avg", "exp_avg_sq")}
        weights = self.model.state_dict()
        return (*prepare_capture(self.step, weights, optimizer, self.buffers), weights)

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The batch's training loss (`batch_loss`): what the worker steps on and the verifier replays."""
        return batch_loss(self.dataset.shape.kind, self.model(inputs), targets)

    def train_step(self, worker_index: int, round_index: int) -> float:
        """One inner AdamW step on the batch of (seed, worker, round, self.step), with the spec's lr for that
        step (`compute.lr_schedule`), set on every step so that a replay from any checkpoint uses the same."""
        training = self.spec.training
        batch = self.batches_ahead.pop((worker_index, round_index, self.step), None)
        inputs, targets = batch if batch is not None else sample_batch(
            self.dataset, training.batch_size, training.seed, worker_index, round_index, self.step)
        loss = self.loss(inputs.to(self.device), targets.to(self.device))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._wait_for_copy()  # the first change to the weights and AdamW state since the last snapshot
        lr = inner_lr(training, round_index, self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.step += 1
        self.samples += training.batch_size
        return float(loss.detach())


def train_segment(trainer: Trainer, start: TrainingState | None, *, worker_index: int, round_index: int,
                  end_step: int, soon: bool = False, final: bool = False,
                  losses: list[float] | None = None) -> TrainingState | DeferredSnapshot:
    """Train from `start` (or from where `trainer` stands, if None) up to `end_step` and return the state.

    The verifier passes the decoded checkpoint i and `end_step` = the end of segment i, then compares
    `checkpoint_hash(result)` with the committed hash of checkpoint i + 1 (of `final_state(result)` for a
    round's last segment). With `soon`, the state comes as a `DeferredSnapshot` copied beside the next steps
    (the worker's rounds, which hand it to the hasher); with `final`, in the form of a round's last checkpoint.
    `losses`, when given, receives each step's training loss: the verifier's vote commits to them, since only a
    replay yields them (`verifier/evidence.py`).
    """
    if start is not None:
        trainer.load(start)
    if end_step < trainer.step:
        raise SpecError(f"end_step {end_step} is before the current step {trainer.step}")
    with flushing_subnormals():  # part of the determinism profile: the same steps, the same bytes, anywhere
        while trainer.step < end_step:
            loss = trainer.train_step(worker_index, round_index)
            if losses is not None:
                losses.append(loss)
    return trainer.snapshot_soon(final) if soon else trainer.snapshot(final)


@dataclasses.dataclass(frozen=True)
class RoundResult:
    """What a worker commits and publishes for one round (before encoding the update)."""

    steps: int
    samples_processed: int
    start_weights_hash: bytes
    checkpoints: list[HashedCheckpoint]
    checkpoint_root: bytes
    end_weights: dict[str, torch.Tensor]
    pseudo_gradient: dict[str, torch.Tensor]  # W_r - W_end, float32

    @property
    def checkpoint_hashes(self) -> list[bytes]:
        return [c.digest for c in self.checkpoints]


class SegmentTrainer(Protocol):
    """How a round trains each segment: from where the trainer stands up to `end_step`, the state to submit."""

    def __call__(self, trainer: Trainer, *, worker_index: int, round_index: int, end_step: int,
                 final: bool = False) -> TrainingState | DeferredSnapshot: ...


def train_segment_soon(trainer: Trainer, *, worker_index: int, round_index: int, end_step: int,
                       final: bool = False) -> DeferredSnapshot:
    """The honest segment of a round: `train_segment` from where the trainer stands, copied beside the next steps."""
    return train_segment(trainer, None, worker_index=worker_index, round_index=round_index, end_step=end_step,
                         soon=True, final=final)


class RoundAcceleration(Protocol):
    """What speeds a round up without changing a byte of it: the worker's `Acceleration`
    (`compute.acceleration.worker_acceleration`), handed to `run_round` and the worker's rounds. A round
    without one (the reference, the verifier's cheat rounds) hashes its checkpoints in a thread and pins nothing."""

    def round_checkpoints(self, trainer: Trainer, *, sink: Callable[[HashedCheckpoint, bytes | None], None] | None,
                          store: BlobStore | None, keep_bytes: bool) -> contextlib.AbstractContextManager:
        """Within: the `CheckpointQueue` the round submits its checkpoints to, the trainer's snapshots taken and
        its training thread placed as the acceleration chooses."""

    def draw_batches_ahead(self, trainer: Trainer, worker_index: int, round_index: int, steps: range) -> object:
        """Start drawing the batches of `steps` for `Trainer.train_step` to take (`Trainer.batches_ahead`)."""


def round_checkpoints(trainer: Trainer, acceleration: RoundAcceleration | None, *,
                      sink: Callable[[HashedCheckpoint, bytes | None], None] | None = None,
                      store: BlobStore | None = None,
                      keep_bytes: bool = False) -> contextlib.AbstractContextManager:
    """Within: the queue a round submits its checkpoints to. The acceleration's, if there is one; otherwise a
    `CheckpointHasher` hashes them in a thread (and stores them, with `store`; hands them to `sink`)."""
    if acceleration is not None:
        return acceleration.round_checkpoints(trainer, sink=sink, store=store, keep_bytes=keep_bytes)
    return CheckpointHasher(sink=sink, keep_bytes=keep_bytes, store=store)


def train_round_segments(trainer: Trainer, checkpoints: CheckpointQueue, *, worker_index: int, round_index: int,
                         steps: int, start_weights: Mapping[str, torch.Tensor] | None = None,
                         resume: TrainingState | None = None, first_segment: int = 0,
                         advance: SegmentTrainer = train_segment_soon,
                         before_segment: Callable[[int], None] | None = None,
                         on_step: Callable[[int], None] | None = None,
                         acceleration: RoundAcceleration | None = None):
    """The round loop: every round, the reference's and the worker's, is trained by this function.

    Starts the round from `start_weights` (checkpoint 0, a fresh AdamW, submitted to `checkpoints` as it is
    copied beside the first step), or resumes it from `resume`, the stored checkpoint of `first_segment`.
    Then each segment in turn: `before_segment(step)` (the worker's stop check), `advance` up to the segment's
    end (the last one in the form of a round's last checkpoint), the state submitted as the next checkpoint,
    `on_step(step)` (progress). With an `acceleration`, the round's batches are drawn ahead on its thread.
    Returns the last segment's state (None when there was nothing left to train).
    """
    every = trainer.spec.training.checkpoint_every
    if acceleration is not None:
        acceleration.draw_batches_ahead(trainer, worker_index, round_index, range(first_segment * every, steps))
    if resume is not None:
        trainer.load(resume)
    else:
        trainer.start_round(start_weights)
        checkpoints.submit(0, trainer.snapshot_soon())  # checkpoint 0, copied beside the first step
    snapshot = None
    segment = first_segment
    while trainer.step < steps:
        if before_segment is not None:
            before_segment(trainer.step)
        _, end = segment_bounds(segment, steps, every)
        snapshot = advance(trainer, worker_index=worker_index, round_index=round_index, end_step=end,
                           final=end == steps)
        segment += 1
        checkpoints.submit(segment, snapshot)
        if on_step is not None:
            on_step(trainer.step)
    return snapshot


def run_round(trainer: Trainer, start_weights: Mapping[str, torch.Tensor], *, worker_index: int, round_index: int,
              steps: int, sink: Callable[[HashedCheckpoint, bytes], None] | None = None,
              keep_bytes: bool = False, on_step: Callable[[int], None] | None = None,
              acceleration: RoundAcceleration | None = None) -> RoundResult:
    """A whole round from `start_weights`: checkpoints 0..n every k steps (`train_round_segments`), hashed in the
    background; the last one (after `steps`) without the optimizer state; the Merkle root and the
    pseudo-gradient.

    `sink(record, bytes)` receives each checkpoint's bytes in the hashing thread (to store them as blobs);
    `on_step(step)` is called after each segment (progress display); `acceleration` (optional) draws the
    batches ahead and pins the training thread, which changes no byte.
    """
    if steps < 1:
        raise SpecError(f"a round needs at least one step, got {steps}")
    start = {name: tensor.detach().clone() for name, tensor in start_weights.items()}  # W_r as it is now
    with round_checkpoints(trainer, acceleration, sink=sink, keep_bytes=keep_bytes) as checkpoints:
        state = train_round_segments(trainer, checkpoints, worker_index=worker_index, round_index=round_index,
                                     steps=steps, start_weights=start, on_step=on_step, acceleration=acceleration)
        if isinstance(state, DeferredSnapshot):
            state = state.result()
        hashed = checkpoints.results()
    pseudo_gradient = {name: (start[name] - state.weights[name]) for name in state.weights}
    return RoundResult(
        steps=steps, samples_processed=trainer.samples, start_weights_hash=weights_hash(start),
        checkpoints=hashed, checkpoint_root=merkle_root([c.digest for c in hashed]),
        end_weights=dict(state.weights), pseudo_gradient=pseudo_gradient,
    )


def batch_loss(kind: str, outputs: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """The loss of a model's `outputs` against `targets` for data of `kind` (`DataShape.kind`): cross-entropy
    over the classes (per token for text), or for regression the squared error of the one output against the
    standardized target (a float32 target: the `.float()` calls change no honest byte, and keep a cheat's
    lower-precision output comparable)."""
    if kind == "regression":
        return functional.mse_loss(outputs.reshape(-1).float(), targets.reshape(-1).float(), reduction=reduction)
    return functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1), reduction=reduction)


@torch.no_grad()
def evaluate(model: torch.nn.Module, dataset: Dataset, batch_size: int = 512) -> tuple[float, float | None]:
    """Mean test loss and accuracy (per token for text) of `model` on the dataset's test split; for regression
    the loss is the mean squared error on the standardized target and there is no accuracy (None: the
    requester's metrics in the original units are `compute.requester.metrics`)."""
    was_training = model.training
    model.eval()
    kind = dataset.shape.kind
    total_loss = 0.0
    correct = 0
    count = 0
    for begin in range(0, len(dataset.test_inputs), batch_size):
        inputs = dataset.test_inputs[begin:begin + batch_size]
        targets = dataset.test_targets[begin:begin + batch_size].reshape(-1)
        outputs = model(inputs)
        total_loss += float(batch_loss(kind, outputs, targets, reduction="sum"))
        if kind != "regression":
            correct += int((outputs.reshape(-1, outputs.shape[-1]).argmax(dim=1) == targets).sum())
        count += int(targets.numel())
    model.train(was_training)
    return total_loss / count, None if kind == "regression" else correct / count
