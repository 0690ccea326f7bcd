"""Sampling: the verifier draws exactly what the chain draws; detection probabilities are exact."""

from __future__ import annotations

import hashlib
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from trolly.chain.market.sampling import sample_segments
from trolly.verifier.errors import ConfigurationError
from trolly.verifier.sampling import (round_detection, sampled_segments, samples_for_detection, segment_count,
                                      task_detection)


@settings(max_examples=50, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), task=st.integers(1, 2**32), round_index=st.integers(0, 1000),
       checkpoints=st.integers(2, 60), samples=st.integers(1, 70))
def test_sampled_segments_are_the_chains_draw_distinct_and_in_range(seed, task, round_index, checkpoints, samples):
    worker = hashlib.sha256(seed).digest()[:20]
    drawn = sampled_segments(seed, task, round_index, worker, checkpoints, samples)
    assert drawn == sample_segments(seed, task, round_index, worker, checkpoints - 1, samples)
    assert len(drawn) == min(samples, checkpoints - 1) == len(set(drawn))
    assert all(0 <= s < checkpoints - 1 for s in drawn)


def test_a_different_block_hash_draws_different_segments():
    worker = b"\x07" * 20
    draws = {tuple(sampled_segments(bytes([b]) * 32, 1, 0, worker, 101, 3)) for b in range(20)}
    assert len(draws) > 15


def test_round_detection_is_the_hypergeometric_miss_probability():
    assert round_detection(5, 1, 2) == Fraction(2, 5)
    assert round_detection(10, 0, 3) == 0
    assert round_detection(10, 10, 1) == 1
    assert round_detection(4, 1, 10) == 1  # more samples than segments: everything is replayed


def test_44_samples_catch_a_ten_percent_cheater_with_probability_0_99():
    assert samples_for_detection(0.1, 0.99) == 44
    assert task_detection(0.1, 44) >= 0.99 > task_detection(0.1, 43)
    assert samples_for_detection(0.1, 0.99, per_segment_detection=0.5) > 44


@pytest.mark.parametrize("call", [
    lambda: task_detection(1.5, 3), lambda: samples_for_detection(0.0, 0.99), lambda: segment_count(1),
    lambda: round_detection(3, 4, 1), lambda: task_detection(float("nan"), 3),
])
def test_nonsense_probabilities_and_counts_are_refused(call):
    with pytest.raises(ConfigurationError):
        call()
