"""W_0 of a task allowing the wasm32 kernel is the portable initialisation of compute/portable_weights.py (the one
a browser tab computes, tests/console/browser_worker/test_weights_vectors.py), for every party that follows the
task; a torch-only task keeps torch's `nn.Linear` initialisation under its seed."""

from __future__ import annotations

import math
import struct

import numpy as np
import torch

from trolly.compute.blobs import AddressPolicy
from trolly.compute.checkpoints import TrainingState, checkpoint_hash
from trolly.compute.models import DataShape, build_model
from trolly.compute.portable_weights import GOLDEN, INIT_DOMAIN, MASK, mix64
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import initial_weights
from trolly.compute.weights_follower import WeightsFollower

DIGITS = DataShape(kind="classification", input_size=64, num_classes=10)


def digits_spec(kernels=("torch", "wasm32"), hidden=(32, 16), seed=77):
    document = example_spec("ab" * 32, model={"arch": "mlp", "config": {"hidden": list(hidden)}},
                            determinism={"threads": 1, "kernels": list(kernels)})
    document["training"]["seed"] = seed
    return spec_from_dict(document)


def float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def documented_value(seed: int, tensor_index: int, element: int, fan_in: int) -> float:
    """One value of W_0 from docs/browser-worker.md's definition, in Python integers and floats only."""
    key = mix64(((INIT_DOMAIN ^ seed) + GOLDEN) & MASK)
    key = mix64(((key ^ tensor_index) + GOLDEN) & MASK)
    top = mix64((key + (element + 1) * GOLDEN) & MASK) >> 40
    bound = float32(1.0 / float32(math.sqrt(fan_in)))
    return float32((2 * top + 1 - 2**24) * 2.0**-24 * bound)


def test_a_wasm32_tasks_w0_is_the_documented_portable_initialisation():
    weights = initial_weights(digits_spec(seed=2**62 + 5), DIGITS)
    assert list(weights) == list(build_model("mlp", {"hidden": [32, 16]}, DIGITS, 0).state_dict())
    for tensor_index, (name, fan_in) in enumerate([("layers.0.weight", 64), ("layers.0.bias", 64),
                                                   ("layers.2.weight", 32), ("layers.2.bias", 32),
                                                   ("layers.4.weight", 16), ("layers.4.bias", 16)]):
        flat = weights[name].reshape(-1)
        assert weights[name].dtype == torch.float32
        for element in (0, 1, flat.numel() - 1):
            assert float(flat[element]) == documented_value(2**62 + 5, tensor_index, element, fan_in)
        assert float(flat.abs().max()) < 1 / math.sqrt(fan_in)


def test_the_portable_initialisation_draws_like_nn_linear():
    """Uniform over (-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch's nn.Linear: mean near 0, variance bound^2 / 3."""
    weight = initial_weights(digits_spec(hidden=(1024,)), DIGITS)["layers.0.weight"].numpy().astype(np.float64)
    bound = 1 / 8
    assert abs(weight.mean()) < 0.01 * bound
    assert abs(weight.var() / (bound**2 / 3) - 1) < 0.01
    assert len(np.unique(weight)) > 0.99 * weight.size


def test_a_native_wasm32_workers_w0_is_the_portable_one_and_a_torch_only_task_keeps_torchs():
    """Every follower of a task (worker, verifier, observer) starts from `initial_weights`: under wasm32 the
    portable initialisation, whose checkpoint 0 is what a tab commits; a torch-only task's is torch's, unchanged."""
    portable, torch_only = digits_spec(), digits_spec(kernels=("torch",))
    follower = WeightsFollower(portable, DIGITS, AddressPolicy())
    derived = follower.initial().weights
    documented = {name: documented_value(77, index, 0, (64, 64, 32, 32, 16, 16)[index])
                  for index, name in enumerate(derived)}
    assert {name: float(tensor.reshape(-1)[0]) for name, tensor in derived.items()} == documented
    torch_model = build_model("mlp", {"hidden": [32, 16]}, DIGITS, 77).state_dict()
    torch_w0 = WeightsFollower(torch_only, DIGITS, AddressPolicy()).initial().weights
    assert all(torch.equal(torch_w0[name], torch_model[name]) for name in torch_model)
    assert checkpoint_hash(TrainingState.fresh(derived)) != checkpoint_hash(TrainingState.fresh(torch_w0))
    only_wasm32 = digits_spec(kernels=("wasm32",))
    assert all(torch.equal(initial_weights(only_wasm32, DIGITS)[name], derived[name]) for name in derived)
