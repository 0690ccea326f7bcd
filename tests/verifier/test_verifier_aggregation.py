"""The aggregation check: round r + 1 must start from the deterministic aggregate of round r's updates (how
W_r is followed from round to round: `test_weights_follower.py`)."""

from __future__ import annotations

import pytest

from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.verifier.aggregation import check_aggregation

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
