"""From a round's updates to the next global weights, bit for bit the same in every process.

    mean      = sum_i samples_i * update_i / sum_i samples_i        (workers in ascending index order)
    momentum' = mu * momentum + mean
    W_{r+1}   = W_r - lr * (mean + mu * momentum')                   (Nesterov, as in DiLoCo: lr 0.7, mu 0.9)

The arithmetic is done in numpy float64, one elementwise operation at a time, and rounded to float32 at the
end. Each such operation is a single IEEE-754 correctly rounded result, with no fused multiply-add, no
threading and no reduction whose order could change, so the bytes do not depend on the CPU, the thread count,
PYTHONHASHSEED or the torch build. The outer momentum is part of the global state every party carries.

A round in which no worker's update passed verification leaves weights and momentum unchanged.

`aggregate_round` is the whole step from what travels (each passed update's encoded bytes, decoded with the
task's codec) to W_{r+1}: the worker's and the verifier's weights follower, the verifier's aggregation check and
the simulation all take it, so the decoding and the step are written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from .canonical import decode_tensors, encode_tensors
from .codecs import get_codec
from .checkpoints import weights_hash
from .errors import EncodingError, RoundError
from .spec import OuterOptimizerSpec, TaskSpec


@dataclasses.dataclass(frozen=True)
class WorkerUpdate:
    """One worker's decoded pseudo-gradient (W_r - W_end) and the samples it trained on."""

    worker_index: int
    samples_processed: int
    update: Mapping[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class GlobalState:
    """The global weights of round `round` and the outer optimizer's momentum."""

    round: int
    weights: Mapping[str, torch.Tensor]
    momentum: Mapping[str, torch.Tensor]

    @classmethod
    def initial(cls, weights: Mapping[str, torch.Tensor]) -> "GlobalState":
        return cls(round=0, weights={n: t.detach().clone() for n, t in weights.items()},
                   momentum={n: torch.zeros_like(t) for n, t in weights.items()})

    def weights_hash(self) -> bytes:
        return weights_hash(self.weights)

    def encode(self) -> bytes:
        tensors = {"round": torch.tensor(self.round, dtype=torch.int64)}
        tensors.update({f"weights/{n}": t for n, t in self.weights.items()})
        tensors.update({f"momentum/{n}": t for n, t in self.momentum.items()})
        return encode_tensors(tensors)

    @classmethod
    def decode(cls, data: bytes) -> "GlobalState":
        try:
            tensors = decode_tensors(data)
        except EncodingError as error:
            raise RoundError(f"global state does not decode: {error}") from None
        round_tensor = tensors.pop("round", None)
        if round_tensor is None or round_tensor.dim() != 0:
            raise RoundError("global state has no round number")
        weights = {k.partition("/")[2]: t for k, t in tensors.items() if k.startswith("weights/")}
        momentum = {k.partition("/")[2]: t for k, t in tensors.items() if k.startswith("momentum/")}
        if set(weights) != set(momentum) or len(weights) + len(momentum) != len(tensors):
            raise RoundError("global state weights and momentum do not match")
        return cls(round=int(round_tensor), weights=weights, momentum=momentum)


def _float64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().to(torch.float32).numpy().astype(np.float64)


def aggregate_updates(updates: Sequence[WorkerUpdate], names: Sequence[str]) -> dict[str, np.ndarray]:
    """The samples-weighted mean update (float64 arrays), summed in ascending worker index."""
    if not updates:
        raise RoundError("no updates to aggregate")
    ordered = sorted(updates, key=lambda u: u.worker_index)
    if len({u.worker_index for u in ordered}) != len(ordered):
        raise RoundError("two updates from the same worker index")
    total = 0
    for update in ordered:
        if not isinstance(update.samples_processed, int) or update.samples_processed <= 0:
            raise RoundError(f"worker {update.worker_index} reports {update.samples_processed!r} samples")
        if set(update.update) != set(names):
            raise RoundError(f"worker {update.worker_index}'s update does not have the model's tensors")
        total += update.samples_processed
    mean: dict[str, np.ndarray] = {}
    for name in names:
        accumulator = None
        for update in ordered:
            term = _float64(update.update[name]) * np.float64(update.samples_processed)
            accumulator = term if accumulator is None else accumulator + term
        mean[name] = accumulator / np.float64(total)
    return mean


def outer_step(state: GlobalState, updates: Sequence[WorkerUpdate], outer: OuterOptimizerSpec) -> GlobalState:
    """W_{r+1} and the new momentum from the verified updates of round `state.round`."""
    names = sorted(state.weights)
    if not updates:
        return GlobalState(round=state.round + 1, weights=dict(state.weights), momentum=dict(state.momentum))
    for update in updates:
        for name in names:
            if name in update.update and update.update[name].shape != state.weights[name].shape:
                raise RoundError(f"worker {update.worker_index}'s update for {name!r} has the wrong shape")
    mean = aggregate_updates(updates, names)
    lr = np.float64(outer.lr)
    mu = np.float64(outer.momentum)
    weights: dict[str, torch.Tensor] = {}
    momentum: dict[str, torch.Tensor] = {}
    for name in names:
        new_momentum = mu * _float64(state.momentum[name]) + mean[name]
        step = mean[name] + mu * new_momentum
        new_weights = _float64(state.weights[name]) - lr * step
        weights[name] = torch.from_numpy(new_weights.astype(np.float32))
        momentum[name] = torch.from_numpy(new_momentum.astype(np.float32))
    return GlobalState(round=state.round + 1, weights=weights, momentum=momentum)


def aggregate_round(previous: GlobalState, encoded_updates: Sequence[tuple[int, int, bytes]],
                    spec: TaskSpec) -> GlobalState:
    """W_{r+1} from W_r and round r's passed updates, given as (worker index, samples processed, encoded bytes):
    each decoded with the spec's codec, exactly as every other party decodes them, then `outer_step`. Raises a
    ComputeError (CodecError, RoundError) when they do not decode or do not fit the model."""
    codec = get_codec(spec.codec)
    updates = [WorkerUpdate(index, samples, codec.decode(data)) for index, samples, data in encoded_updates]
    return outer_step(previous, updates, spec.training.outer_optimizer)
