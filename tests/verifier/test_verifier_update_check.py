"""The update check (issue 19 item 1): a committed update must follow from the committed checkpoints.

update = codec(W_r - W_end + previous residual), residual = what it leaves out; both hashes committed. A
verifier recomputes them without training; a mismatch makes every sampled segment of that round FAIL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest
import torch

from trolly.compute.canonical import encode_tensors
from trolly.compute.codecs import CODEC_REGISTRY, get_codec
from trolly.compute.model_layout import model_layout
from trolly.verifier.segment_check import FAILED, PASSED, UNAVAILABLE, Replayer, verify_segment
from trolly.verifier.checkpoint_sources import MemorySource
from trolly.verifier.update_check import UpdateChecks, expected_update, expected_update_reference, judge_update

from verifier_helpers import build_round, claim_for, digits, tiny_spec


@pytest.fixture(scope="module")
def spec():
    return tiny_spec()


@pytest.fixture()
def replayer():
    replayer = Replayer()
    yield replayer
    replayer.close()


def source_of(published, round_index=1, extra=None) -> MemorySource:
    source = MemorySource()
    source.add_round(1, round_index, published.listing, published.blobs)
    source.blobs.update(extra or {})
    return source


def verify(claim, spec, source, replayer):
    return asyncio.run(verify_segment(claim, spec, digits(), source, replayer))


def test_forged_update_fails_every_sampled_segment_while_each_replays_bitwise(spec, replayer):
    cheated, published = build_round(spec, "forged_update")
    for segment in range(len(published.listing) - 1):
        report = verify(claim_for(cheated, published, segment), spec, source_of(published), replayer)
        assert report.outcome == FAILED and "forged update" in report.reason
        assert report.comparison is not None and report.comparison.passed  # the segment itself is honest
    assert replayer.update_checks.computed == 1  # one check for the round, shared by its segments


def test_segments_of_one_round_verified_at_once_share_one_update_check(spec, replayer):
    cheated, published = build_round(spec)
    source = source_of(published)

    async def yielding(function):  # as the service's executor: other segments go on while this one runs
        await asyncio.sleep(0)
        return function()

    async def both():
        return await asyncio.gather(*(verify_segment(claim_for(cheated, published, segment), spec, digits(), source,
                                                     replayer, run_replay=yielding) for segment in (0, 1)))

    reports = asyncio.run(both())
    assert [report.outcome for report in reports] == [PASSED, PASSED], [report.reason for report in reports]
    assert replayer.update_checks.computed == 1  # the second segment waited for the first one's check


def test_a_shared_update_check_that_finds_a_forged_update_fails_every_waiting_segment(spec, replayer):
    cheated, published = build_round(spec, "forged_update")
    source = source_of(published)

    async def yielding(function):
        await asyncio.sleep(0)
        return function()

    async def three():
        return await asyncio.gather(*(verify_segment(claim_for(cheated, published, segment), spec, digits(), source,
                                                     replayer, run_replay=yielding) for segment in (0, 1, 2)))

    reports = asyncio.run(three())
    assert all(report.outcome == FAILED and "forged update" in report.reason for report in reports)
    assert replayer.update_checks.computed == 1


def test_honest_round_passes_the_update_check(spec, replayer):
    cheated, published = build_round(spec)
    report = verify(claim_for(cheated, published, 0), spec, source_of(published), replayer)
    assert report.outcome == PASSED, report.reason
    assert "update_check_seconds" in report.details


def test_a_later_round_is_checked_with_the_residual_committed_in_the_round_before(spec, replayer):
    earlier, earlier_published = build_round(spec, round_index=0)
    cheated, _ = build_round(spec, round_index=1)
    published = cheated.publish(previous_residual=earlier_published.residual)
    residual_blob = {earlier_published.residual_hash.hex(): earlier_published.blobs[earlier_published.residual_hash.hex()]}
    claim = dataclasses.replace(claim_for(cheated, published, 1), previous_residual_hash=earlier_published.residual_hash)
    assert verify(claim, spec, source_of(published, extra=residual_blob), replayer).outcome == PASSED
    # the same update claimed without the previous residual (as if the worker had dropped it) does not match
    forgetful = dataclasses.replace(claim, previous_residual_hash=b"")
    report = verify(forgetful, spec, source_of(published, extra=residual_blob), replayer)
    assert report.outcome == FAILED and "forged update" in report.reason


def test_a_residual_hash_that_is_not_what_the_update_leaves_out_fails(spec, replayer):
    cheated, published = build_round(spec)
    claim = dataclasses.replace(claim_for(cheated, published, 0), residual_hash=hashlib.sha256(b"other").digest())
    report = verify(claim, spec, source_of(published), replayer)
    assert report.outcome == FAILED and "residual" in report.reason


def test_a_commitment_without_update_or_residual_fails(spec, replayer):
    cheated, published = build_round(spec)
    claim = dataclasses.replace(claim_for(cheated, published, 0), residual_hash=b"")
    assert verify(claim, spec, source_of(published), replayer).outcome == FAILED


def test_a_previous_residual_not_served_is_unavailable_and_checked_again_later(spec, replayer):
    cheated, published = build_round(spec)
    missing = hashlib.sha256(b"residual nobody serves").digest()
    claim = dataclasses.replace(claim_for(cheated, published, 0), previous_residual_hash=missing)
    report = verify(claim, spec, source_of(published), replayer)
    assert report.outcome == UNAVAILABLE and "previous round's residual" in report.reason
    assert replayer.update_checks.get((1,)) is None and replayer.update_checks.computed == 0


def test_a_previous_residual_of_another_shape_is_a_verdict_not_a_crash(spec, replayer):
    cheated, published = build_round(spec)
    garbage = encode_tensors({"layers.0.weight": torch.zeros(2**4, 3)})
    claim = dataclasses.replace(claim_for(cheated, published, 0), previous_residual_hash=hashlib.sha256(garbage).digest())
    report = verify(claim, spec, source_of(published, extra={hashlib.sha256(garbage).hexdigest(): garbage}), replayer)
    assert report.outcome == FAILED and "does not decode" in report.reason


@pytest.mark.parametrize("codec", sorted(CODEC_REGISTRY))
def test_fast_and_reference_update_recomputations_agree_bit_for_bit(codec):
    generator = torch.Generator().manual_seed(5)
    layout = model_layout(tiny_spec(), digits().shape)
    start = {n: torch.randn(s, generator=generator) for n, (_, s) in layout.weights.items()}
    end = {n: t - 1e-2 * torch.randn(t.shape, generator=generator) for n, t in start.items()}
    previous = {n: 1e-3 * torch.randn(t.shape, generator=generator) for n, t in start.items()}
    kept = UpdateChecks().workspace  # the scratch a verifier keeps from one check to the next
    for residual in (None, previous, None):
        reference_update, reference_residual = expected_update_reference(get_codec(codec), start, end, residual)
        for workspace in (None, kept):
            fast_update, fast_residual = expected_update(get_codec(codec), start, end, residual, workspace)
            assert bytes(fast_update) == reference_update and bytes(fast_residual) == reference_residual


def test_judge_update_refuses_a_last_checkpoint_with_optimizer_state(spec):
    cheated, published = build_round(spec)
    first = published.blobs[published.listing[0]]
    verdict = judge_update(get_codec(spec.codec), model_layout(spec, digits().shape), first=first, last=first,
                           previous_residual=None, start_weights_hash=cheated.start_weights_hash,
                           update_hash=published.update_hash, residual_hash=published.residual_hash)
    assert verdict.outcome == "fail" and "optimizer state" in verdict.reason
