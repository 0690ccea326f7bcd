"""The aggregation check: round r + 1 must start from the deterministic aggregate of round r's updates."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import torch

from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.rounds import GlobalState, WorkerUpdate, outer_step
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.verifier.aggregation import GlobalWeights, PassedUpdate, check_aggregation
from trolly.verifier.errors import WorkUnavailable

from verifier_helpers import digits, tiny_spec


@pytest.fixture(scope="module")
def round_zero():
    """W_0, and two workers' encoded round-0 updates with the W_1 an honest worker computes."""
    spec = tiny_spec()
    trainer = Trainer(spec, digits())
    state = GlobalState.initial(initial_weights(spec, digits().shape))
    encoded, sent = [], []
    for worker in (0, 1):
        result = run_round(trainer, state.weights, worker_index=worker, round_index=0, steps=spec.training.inner_steps)
        data, decoded = ErrorFeedback(get_codec(spec.codec)).encode(result.pseudo_gradient)
        encoded.append((worker, result.samples_processed, data))
        sent.append(WorkerUpdate(worker, result.samples_processed, decoded))
    return spec, state, encoded, outer_step(state, sent, spec.training.outer_optimizer)


def test_the_honest_next_start_is_the_aggregate(round_zero):
    spec, state, encoded, next_state = round_zero
    report = check_aggregation(state, encoded, spec, next_state.weights_hash())
    assert report.matches and report.round == 1


def test_stale_or_partial_start_weights_are_not_the_aggregate(round_zero):
    spec, state, encoded, next_state = round_zero
    assert not check_aggregation(state, encoded, spec, state.weights_hash()).matches
    only_one = outer_step(state, [WorkerUpdate(0, encoded[0][1], get_codec(spec.codec).decode(encoded[0][2]))],
                          spec.training.outer_optimizer)
    report = check_aggregation(state, encoded, spec, only_one.weights_hash())
    assert not report.matches and "not the aggregate" in report.reason


def test_updates_that_do_not_decode_are_reported(round_zero):
    spec, state, encoded, next_state = round_zero
    report = check_aggregation(state, [(0, 10, b"garbage")], spec, next_state.weights_hash())
    assert not report.matches and "do not aggregate" in report.reason


def test_global_weights_are_computed_once_and_survive_a_restart(round_zero, tmp_path):
    spec, state, encoded, next_state = round_zero
    blobs = {hashlib.sha256(data).digest(): data for _, _, data in encoded}
    passed = [PassedUpdate(w, s, hashlib.sha256(d).digest(), "") for w, s, d in encoded]
    fetched = []

    async def fetch(update):
        fetched.append(update.worker_index)
        return blobs[update.update_hash]

    tracker = GlobalWeights(spec, dict(state.weights), tmp_path)
    result = asyncio.run(tracker.weights_for(1, lambda r: passed, fetch))
    assert result.weights_hash() == next_state.weights_hash() and fetched == [0, 1]
    restarted = GlobalWeights(spec, dict(state.weights), tmp_path)
    again = asyncio.run(restarted.weights_for(1, lambda r: passed, fetch))
    assert again.weights_hash() == next_state.weights_hash() and fetched == [0, 1]  # read from disk, not refetched


def test_an_update_that_does_not_match_its_commitment_is_unavailable(round_zero):
    spec, state, encoded, _ = round_zero
    passed = [PassedUpdate(0, encoded[0][1], b"\x00" * 32, "")]

    async def fetch(update):
        return encoded[0][2]

    with pytest.raises(WorkUnavailable, match="does not match"):
        asyncio.run(GlobalWeights(spec, dict(state.weights)).weights_for(1, lambda r: passed, fetch))


def test_a_round_without_passed_updates_keeps_the_weights(round_zero):
    spec, state, _, _ = round_zero

    async def fetch(update):  # pragma: no cover - nothing to fetch
        raise AssertionError

    result = asyncio.run(GlobalWeights(spec, dict(state.weights)).weights_for(2, lambda r: [], fetch))
    assert result.weights_hash() == state.weights_hash() and result.round == 2
    assert all(torch.equal(result.momentum[n], state.momentum[n]) for n in state.momentum)
