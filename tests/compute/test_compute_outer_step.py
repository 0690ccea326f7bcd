"""Outer step: weighted by samples, Nesterov, and identical bytes in every process."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from trolly.compute.errors import RoundError
from trolly.compute.outer_step import GlobalState, WorkerUpdate, aggregate_updates, outer_step
from trolly.compute.spec import OuterOptimizerSpec


def make_state(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return GlobalState.initial({"a.weight": torch.randn(64, 33, generator=generator), "a.bias": torch.randn(7, generator=generator)})


def make_updates(state, seed=1, count=3):
    generator = torch.Generator().manual_seed(seed)
    return [WorkerUpdate(worker_index=i, samples_processed=32 * (i + 1) + 5,
                         update={n: torch.randn(t.shape, generator=generator) * 0.01 for n, t in state.weights.items()})
            for i in range(count)]


def test_mean_is_weighted_by_samples_processed():
    state = make_state()
    updates = [WorkerUpdate(0, 1, {"a.weight": torch.ones(64, 33), "a.bias": torch.ones(7)}),
               WorkerUpdate(1, 3, {"a.weight": torch.full((64, 33), 5.0), "a.bias": torch.zeros(7)})]
    mean = aggregate_updates(updates, ["a.bias", "a.weight"])
    assert np.all(mean["a.weight"] == 4.0) and np.all(mean["a.bias"] == 0.25)


def test_outer_step_is_nesterov_with_momentum_carried_between_rounds():
    outer = OuterOptimizerSpec(lr=0.7, momentum=0.9)
    state = GlobalState.initial({"w": torch.tensor([1.0, 2.0])})
    delta = {"w": torch.tensor([0.1, -0.2])}
    first = outer_step(state, [WorkerUpdate(0, 10, delta)], outer)
    # m1 = g, W1 = W0 - lr * (g + mu * m1)
    assert torch.allclose(first.momentum["w"], delta["w"])
    assert torch.allclose(first.weights["w"], torch.tensor([1.0, 2.0]) - 0.7 * 1.9 * delta["w"])
    second = outer_step(first, [WorkerUpdate(0, 10, delta)], outer)
    assert torch.allclose(second.momentum["w"], 1.9 * delta["w"])
    assert second.round == 2


def test_update_order_does_not_matter_only_worker_index_does():
    state = make_state()
    updates = make_updates(state)
    outer = OuterOptimizerSpec()
    forward = outer_step(state, updates, outer)
    backward = outer_step(state, list(reversed(updates)), outer)
    assert forward.encode() == backward.encode()


def test_a_round_without_verified_updates_keeps_the_weights():
    state = make_state()
    after = outer_step(state, [], OuterOptimizerSpec())
    assert after.round == 1 and after.weights_hash() == state.weights_hash()


@pytest.mark.parametrize("bad", [
    lambda s, u: [WorkerUpdate(0, 0, u[0].update)],
    lambda s, u: [u[0], WorkerUpdate(0, 5, u[1].update)],
    lambda s, u: [WorkerUpdate(0, 5, {"a.weight": u[0].update["a.weight"]})],
    lambda s, u: [WorkerUpdate(0, 5, {"a.weight": torch.zeros(3), "a.bias": torch.zeros(7)})],
])
def test_malformed_rounds_are_refused(bad):
    state = make_state()
    with pytest.raises(RoundError):
        outer_step(state, bad(state, make_updates(state)), OuterOptimizerSpec())


def test_global_state_bytes_round_trip():
    state = outer_step(make_state(), make_updates(make_state()), OuterOptimizerSpec())
    assert GlobalState.decode(state.encode()).encode() == state.encode()
    with pytest.raises(RoundError):
        GlobalState.decode(b"junk")


AGGREGATE_SCRIPT = """
import hashlib, sys, torch
sys.path.insert(0, sys.argv[1])
from test_compute_outer_step import make_state, make_updates
from trolly.compute.outer_step import outer_step
from trolly.compute.spec import OuterOptimizerSpec
torch.set_num_threads(int(sys.argv[2]))
state = make_state()
for round_index in range(3):
    state = outer_step(state, make_updates(state, seed=round_index + 1, count=4), OuterOptimizerSpec(lr=0.7, momentum=0.9))
print(hashlib.sha256(state.encode()).hexdigest())
"""


@pytest.mark.slow
def test_aggregation_gives_identical_weights_in_every_process():
    here = os.path.dirname(__file__)
    digests = set()
    for hash_seed, threads in (("0", "1"), ("12345", "2"), ("random", "1")):
        environment = dict(os.environ, PYTHONHASHSEED=hash_seed)
        completed = subprocess.run([sys.executable, "-c", AGGREGATE_SCRIPT, here, threads], env=environment,
                                   capture_output=True, text=True, timeout=300, check=True)
        digests.add(completed.stdout.strip())
    state = make_state()
    for round_index in range(3):
        state = outer_step(state, make_updates(state, seed=round_index + 1, count=4), OuterOptimizerSpec(lr=0.7, momentum=0.9))
    digests.add(hashlib.sha256(state.encode()).hexdigest())
    assert len(digests) == 1
