"""The cheat registry, the context a cheat receives and the round it returns (see the package docstring)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import pathlib
import sys
from collections.abc import Callable, Mapping

import torch

from ..canonical import decode_tensors
from ..canonical_copy import allocate_canonical
from ..checkpoints import TrainingState, encode_checkpoint, final_state, weights_hash
from ..codecs import get_codec
from ..codecs.fused import encode_with_feedback
from ..errors import CheatError
from ..checkpoint_merkle import merkle_root
from ..training import Trainer, segment_bounds, train_segment


@dataclasses.dataclass(frozen=True)
class CheatContext:
    """What a cheating worker has for one round (see the package docstring)."""

    trainer: Trainer
    start_weights: Mapping[str, torch.Tensor]
    worker_index: int
    round_index: int
    steps: int
    faked_segments: frozenset[int]
    generator: torch.Generator
    other_worker_round: Callable[[], "CheatedRound"] | None = None
    earlier_round: Callable[[], "CheatedRound"] | None = None

    @property
    def spec(self):
        return self.trainer.spec

    @property
    def segments(self) -> int:
        return self.spec.num_checkpoints(self.steps) - 1


@dataclasses.dataclass(frozen=True)
class PublishedRound:
    """What a worker serves and commits: blobs by hex hash, the listing, the root, and (for a round that names
    its codec) the update and error-feedback residual with their hashes."""

    blobs: Mapping[str, bytes]
    listing: tuple[str, ...]
    checkpoint_root: bytes
    update_hash: bytes = b""
    residual_hash: bytes = b""
    residual: Mapping[str, torch.Tensor] | None = None
    """The new residual's tensors: the next round's `previous_residual`."""


@dataclasses.dataclass(frozen=True)
class CheatedRound:
    """A round as a (possibly cheating) worker presents it."""

    checkpoints: tuple[TrainingState, ...]
    steps: int
    samples_processed: int
    start_weights_hash: bytes
    faked_segments: frozenset[int] = frozenset()
    withheld: frozenset[int] = frozenset()  # checkpoint indices listed but never served
    codec: str = ""
    """The spec's codec: the round's update and residual are published with it ("": no update)."""
    forge_update: Callable[[bytes], bytes] | None = None
    """A cheat's change to the honest update's bytes (the residual committed stays the honest one)."""
    forge_checkpoint: Callable[[int, bytes], bytes] | None = None
    """A cheat's replacement of checkpoint i's bytes (`(i, honest bytes) -> bytes served and committed`)."""

    def publish(self, previous_residual: Mapping[str, torch.Tensor] | None = None) -> PublishedRound:
        """The checkpoints' bytes, the last in the form of a round's last checkpoint (`final_state`), and the
        update and residual as the protocol makes them from checkpoints 0 and n and `previous_residual`
        (None: zero, a worker's first round)."""
        blobs: dict[str, bytes] = {}
        listing = []
        for index, state in enumerate(self.checkpoints):
            data = encode_checkpoint(final_state(state) if index == len(self.checkpoints) - 1 else state)
            if self.forge_checkpoint is not None:
                data = self.forge_checkpoint(index, data)
            digest = hashlib.sha256(data).hexdigest()
            listing.append(digest)
            if index not in self.withheld:
                blobs[digest] = data
        root = merkle_root([bytes.fromhex(h) for h in listing])
        if not self.codec:
            return PublishedRound(blobs, tuple(listing), root)
        start, end = self.checkpoints[0].weights, self.checkpoints[-1].weights
        # As the worker encodes its update (`worker.round_training.encode_update`) and the verifier's update check
        # recomputes it: the codec's encoding of W_r - W_end plus the previous residual, in canonical bytes.
        residual_bytes, residual = allocate_canonical(end)
        update = bytes(encode_with_feedback(get_codec(self.codec), start, end, previous_residual, residual))
        residual_bytes = bytes(residual_bytes)
        if self.forge_update is not None:
            update = self.forge_update(update)
        for data in (update, residual_bytes):
            blobs[hashlib.sha256(data).hexdigest()] = data
        return PublishedRound(blobs, tuple(listing), root, hashlib.sha256(update).digest(),
                              hashlib.sha256(residual_bytes).digest(), decode_tensors(residual_bytes))


CheatFunction = Callable[[CheatContext], CheatedRound]


@dataclasses.dataclass(frozen=True)
class Cheat:
    """A registered cheat: its one name, what it does, and the function that plays a round with it."""

    name: str
    description: str
    play: CheatFunction
    final: Callable[[bytes], bytes] | None = None
    """What the cheater reports as the final weights hash, given the true one (None: the true one)."""


CHEATS: dict[str, Cheat] = {}
"""Every cheat by name, in the order registered: the built-in ones (`builtin.py`), then any module's. The
worker's `--cheat`, the verification benchmark and `trolly-verifier cheats` all read this one dict."""


def register_cheat(name: str, description: str, *,
                   final: Callable[[bytes], bytes] | None = None) -> Callable[[CheatFunction], CheatFunction]:
    """Decorator: register `function(context) -> CheatedRound` under `name` (names are unique); `final`, for a
    cheat on the final report, maps the true final weights hash to the one the cheater reports."""
    if not name or not name.replace("_", "").isalnum():
        raise CheatError(f"cheat name {name!r} must be letters, digits or '_'")

    def register(function: CheatFunction) -> CheatFunction:
        if name in CHEATS and CHEATS[name].play is not function:
            raise CheatError(f"a cheat named {name!r} is already registered")
        if not callable(function):
            raise CheatError(f"cheat {name!r} is not callable")
        CHEATS[name] = Cheat(name, description, function, final)
        return function

    return register


def get_cheat(name: str) -> Cheat:
    try:
        return CHEATS[name]
    except KeyError:
        raise CheatError(f"unknown cheat {name!r}; known: {', '.join(sorted(CHEATS))}") from None


def load_cheat_module(path: str | pathlib.Path) -> list[str]:
    """Import a Python file that registers cheats; returns the names it added."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise CheatError(f"cheat module {str(path)!r} does not exist")
    before = set(CHEATS)
    module_name = f"trolly_cheat_module_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CheatError(f"cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except CheatError:
        raise
    except Exception as error:  # the file is someone else's code: report, do not crash with its traceback
        sys.modules.pop(module_name, None)
        raise CheatError(f"cheat module {str(path)!r} failed to load: {type(error).__name__}: {error}") from None
    added = sorted(set(CHEATS) - before)
    if not added:
        raise CheatError(f"cheat module {str(path)!r} registered no cheat (call register_cheat)")
    return added


def choose_faked_segments(segments: int, fraction: float, generator: torch.Generator) -> frozenset[int]:
    """A random `fraction` of a round's segments (at least one): the segments the benchmark's cheats fake."""
    if segments < 1 or not 0.0 < fraction <= 1.0:
        raise CheatError(f"need at least one segment and a fraction in (0, 1], got {segments}, {fraction}")
    count = max(1, round(segments * fraction))
    return frozenset(torch.randperm(segments, generator=generator)[:count].tolist())


def honest_round(context: CheatContext) -> CheatedRound:
    """The honest round, through the same `train_segment` as `compute.training.run_round`."""
    return segment_cheat(None)(dataclasses.replace(context, faked_segments=frozenset()))


def segment_cheat(fake: Callable[[CheatContext, int, TrainingState], TrainingState] | None) -> CheatFunction:
    """A round-level cheat that fakes `context.faked_segments` with `fake` and trains the rest honestly."""

    def run(context: CheatContext) -> CheatedRound:
        trainer = context.trainer
        start = TrainingState.fresh(context.start_weights)
        trainer.load(start)
        checkpoints = [start]
        state = start
        every = context.spec.training.checkpoint_every
        for segment in range(context.segments):
            _, end = segment_bounds(segment, context.steps, every)
            if fake is not None and segment in context.faked_segments:
                state = fake(context, segment, state)
                trainer.load(state)  # carry on honestly from the faked checkpoint
            else:
                state = train_segment(trainer, None, worker_index=context.worker_index,
                                      round_index=context.round_index, end_step=end)
            checkpoints.append(state)
        return CheatedRound(tuple(checkpoints), context.steps, context.steps * context.spec.training.batch_size,
                            weights_hash(start.weights), frozenset(context.faked_segments) if fake else frozenset(),
                            codec=context.spec.codec)

    return run
