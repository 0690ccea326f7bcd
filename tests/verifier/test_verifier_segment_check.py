"""Replaying segments: honest rounds pass under the same and another profile, every cheat class fails,
unreachable and tampered checkpoints are reported as such, and the worker's claims are checked."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch

from net_helpers import free_port
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS, VERDICT_UNAVAILABLE
from trolly.compute.blobs import AddressPolicy, BlobClient, RetryPolicy
from trolly.compute.checkpoints import decode_checkpoint, encode_checkpoint, final_state
from trolly.compute.training import Trainer
from trolly.compute.cheats import CHEATS
from trolly.verifier.segment_check import (FAILED, PASSED, TAMPERED, UNAVAILABLE, ProfileRefused, Replayer,
                                           SegmentClaim, parse_profile, verify_segment)
from trolly.verifier.checkpoint_sources import MemorySource
from trolly.verifier.tolerance import BITWISE, TOLERANCE

from verifier_helpers import (build_round, claim_for, digits, expected_start, foreign_profile, own_profile, source_of,
                              tiny_spec)

CHEAT_NAMES = sorted(name for name, cheat in CHEATS.items() if cheat.final is None)
"""The cheats on training segments (`forged_final` lies in the final report: test_compute_cheats.py)."""


@pytest.fixture(scope="module")
def spec():
    return tiny_spec()


@pytest.fixture(scope="module")
def trainer(spec):
    return Trainer(spec, digits())


@pytest.fixture(scope="module")
def replayer():
    replayer = Replayer()
    yield replayer
    replayer.close()


@pytest.fixture(autouse=True)
def forgetting(replayer):
    """Each test serves its own bytes (tampered, withheld): nothing a previous test fetched is remembered."""
    replayer.verified_blobs.clear()
    replayer.update_checks.clear()


@pytest.fixture(scope="module")
def tolerant():
    """A verifier that cannot run other instruction sets, measuring the tolerance it would need:
    `foreign_profile()` segments go to the tolerance. (Claiming the foreign profile for a round trained here is
    exactly what a CPU lacking ours would see.) The product refuses instead (`test_..._is_refused`)."""
    replayer = Replayer(children=False, tolerance_fallback=True)
    yield replayer
    replayer.close()


@pytest.fixture(scope="module")
def honest(spec, trainer):
    return build_round(spec, trainer=trainer)


def verify(claim, spec, source, replayer, **options):
    return asyncio.run(verify_segment(claim, spec, digits(), source, replayer, **options))


@pytest.mark.parametrize("profile", ["own", "foreign"])
def test_every_honest_segment_passes_under_the_same_and_another_profile(spec, honest, replayer, tolerant, profile):
    cheated, published = honest
    claimed_profile = own_profile() if profile == "own" else foreign_profile()
    replayer = replayer if profile == "own" else tolerant
    for segment in range(len(published.listing) - 1):
        report = verify(claim_for(cheated, published, segment, claimed_profile), spec, source_of(published), replayer,
                        expected_start_hash=expected_start(spec))
        assert report.outcome == PASSED, report.reason
        assert report.verdict == VERDICT_PASS
        assert report.comparison.mode == (BITWISE if profile == "own" else TOLERANCE)
        assert report.comparison.weights_error <= report.comparison.threshold


TOLERANCE_BLIND_SPOT = pytest.mark.xfail(strict=True, reason=(
    "fp16 autocast changes a short segment by ~1e-4 of its update, as much as honest drift across instruction "
    "sets: only an exact replay (this verifier's own or a child's instruction set) catches it; see tolerance.py"))
CHEAT_CASES = [pytest.param(cheat, profile, id=f"{profile}-{cheat}",
                            marks=[TOLERANCE_BLIND_SPOT] if (cheat, profile) == ("fp16", "foreign") else [])
               for cheat in CHEAT_NAMES for profile in ("own", "foreign")]


@pytest.mark.parametrize("cheat, profile", CHEAT_CASES)
def test_every_cheat_class_fails_on_its_faked_segments(spec, trainer, replayer, tolerant, cheat, profile):
    cheated, published = build_round(spec, cheat, trainer=trainer)
    assert cheated.faked_segments, "a cheat must fake at least one segment"
    claimed_profile = own_profile() if profile == "own" else foreign_profile()
    replayer = replayer if profile == "own" else tolerant
    for segment in sorted(cheated.faked_segments):
        report = verify(claim_for(cheated, published, segment, claimed_profile), spec, source_of(published), replayer,
                        expected_start_hash=expected_start(spec))
        assert report.outcome != PASSED, f"{cheat} segment {segment} passed: {report.reason}"
        assert report.verdict in (VERDICT_FAIL, VERDICT_UNAVAILABLE)


def test_the_comparison_runs_in_the_replays_turn_when_the_end_checkpoint_is_already_fetched(spec, honest, replayer):
    cheated, published = honest
    turns = []

    async def counting(function):  # stands in for the service's replay thread, one turn per call
        turns.append(function)
        return function()

    report = verify(claim_for(cheated, published, 1), spec, source_of(published), replayer, run_replay=counting)
    assert report.outcome == PASSED and report.comparison.mode == BITWISE, report.reason
    assert len(turns) == 2  # the replay with its comparison, then the round's update check


def test_a_replay_over_before_its_end_checkpoint_arrives_is_compared_when_it_arrives(spec, honest, replayer):
    cheated, published = honest

    class SlowEnd(MemorySource):
        async def fetch(self, digest):
            if digest == published.listing[2]:
                await asyncio.sleep(0.05)  # the replay (its own turn) is over by then
            return await super().fetch(digest)

    source = SlowEnd()
    source.add_round(1, 1, published.listing, published.blobs)
    turns = []

    async def counting(function):
        turns.append(function)
        return function()

    report = verify(claim_for(cheated, published, 1), spec, source, replayer, run_replay=counting)
    assert report.outcome == PASSED and report.comparison.mode == BITWISE, report.reason
    assert len(turns) == 3  # the replay, then its comparison, then the update check


def test_a_withheld_checkpoint_is_voted_unavailable(spec, trainer, replayer):
    cheated, published = build_round(spec, "withheld", trainer=trainer)
    report = verify(claim_for(cheated, published, 1), spec, source_of(published), replayer)
    assert report.outcome == UNAVAILABLE and report.verdict == VERDICT_UNAVAILABLE
    assert "withheld" in report.reason


def test_an_unreachable_worker_is_reported_unavailable(spec, honest, replayer):
    cheated, published = honest
    claim = claim_for(cheated, published, 0, blob_url=f"http://127.0.0.1:{free_port()}")

    async def run():
        async with BlobClient([claim.blob_url], retry=RetryPolicy(attempts=1, request_timeout=2.0),
                              address_policy=AddressPolicy(allow_private=True)) as client:
            return await verify_segment(claim, spec, digits(), client, replayer)

    report = asyncio.run(run())
    assert report.outcome == UNAVAILABLE and "not served" in report.reason


def test_a_checkpoint_served_with_other_bytes_is_reported_tampered(spec, honest, replayer):
    cheated, published = honest
    source = source_of(published)
    digest = published.listing[2]
    source.blobs[digest] = source.blobs[digest][:-1] + bytes([source.blobs[digest][-1] ^ 1])
    report = verify(claim_for(cheated, published, 1), spec, source, replayer)
    assert report.outcome == TAMPERED and report.verdict == VERDICT_UNAVAILABLE
    assert "other bytes" in report.reason


def test_a_listing_that_is_not_the_committed_root_is_reported_tampered(spec, honest, replayer):
    cheated, published = honest
    source = source_of(published)
    listing = source.listings[(1, 1)]
    source.listings[(1, 1)] = [listing[1], listing[0], *listing[2:]]
    report = verify(claim_for(cheated, published, 0), spec, source, replayer)
    assert report.outcome == TAMPERED and "Merkle root" in report.reason


def test_inflated_samples_fail_before_any_fetch(spec, honest, replayer):
    cheated, published = honest
    claim = dataclasses.replace(claim_for(cheated, published, 0), samples_processed=cheated.samples_processed + 8)
    report = verify(claim, spec, MemorySource(), replayer)  # nothing served: the claim alone is enough
    assert report.outcome == FAILED and "samples" in report.reason


def test_a_checkpoint_count_that_does_not_fit_the_steps_fails(spec, honest, replayer):
    cheated, published = honest
    claim = dataclasses.replace(claim_for(cheated, published, 0), steps=cheated.steps + 10)
    report = verify(claim, spec, source_of(published), replayer)
    assert report.outcome == FAILED and "checkpoints" in report.reason


def test_start_weights_other_than_the_round_aggregate_fail(spec, honest, replayer):
    cheated, published = honest
    report = verify(claim_for(cheated, published, 1), spec, source_of(published), replayer,
                    expected_start_hash=b"\x01" * 32, expected_start_source="test aggregate")
    assert report.outcome == FAILED and "test aggregate" in report.reason


def test_segment_zero_must_hold_the_committed_start_weights(spec, honest, replayer):
    cheated, published = honest
    claim = dataclasses.replace(claim_for(cheated, published, 0), start_weights_hash=b"\x02" * 32)
    report = verify(claim, spec, source_of(published), replayer)
    assert report.outcome == FAILED and "checkpoint 0 holds weights" in report.reason


def test_a_checkpoint_labelled_at_the_wrong_step_fails(spec, trainer, replayer):
    cheated, _ = build_round(spec, trainer=trainer)
    states = list(cheated.checkpoints)
    states[2] = dataclasses.replace(states[2], step=states[2].step + 1)
    relabelled = dataclasses.replace(cheated, checkpoints=tuple(states)).publish()
    report = verify(claim_for(cheated, relabelled, 1), spec, source_of(relabelled), replayer)
    assert report.outcome == FAILED and "labelled step" in report.reason


def publish_as_is(states):
    """A round's checkpoints published exactly as given (the last one too keeps whatever optimizer state it has)."""
    from trolly.compute.checkpoint_merkle import merkle_root
    from trolly.compute.cheats import PublishedRound
    import hashlib

    blobs = {hashlib.sha256(encode_checkpoint(state)).hexdigest(): encode_checkpoint(state) for state in states}
    listing = tuple(hashlib.sha256(encode_checkpoint(state)).hexdigest() for state in states)
    return PublishedRound(blobs, listing, merkle_root([bytes.fromhex(h) for h in listing]))


def test_only_the_rounds_last_checkpoint_leaves_out_the_optimizer_state(spec, honest, replayer):
    cheated, published = honest
    last = len(published.listing) - 2
    assert decode_checkpoint(published.blobs[published.listing[-1]]).final  # as an honest worker publishes it
    report = verify(claim_for(cheated, published, last), spec, source_of(published), replayer)
    assert report.outcome == PASSED and report.comparison.moment_error == 0.0, report.reason

    with_optimizer = publish_as_is(cheated.checkpoints)  # the last one keeps its AdamW state
    report = verify(claim_for(cheated, with_optimizer, last), spec, source_of(with_optimizer), replayer)
    assert report.outcome == FAILED and "is the round's last and must hold no optimizer state" in report.reason

    states = list(cheated.checkpoints)
    states[2] = final_state(states[2])
    stripped = dataclasses.replace(cheated, checkpoints=tuple(states)).publish()
    for segment in (1, 2):  # checkpoint 2 ends segment 1 and starts segment 2
        report = verify(claim_for(cheated, stripped, segment), spec, source_of(stripped), replayer)
        assert report.outcome == FAILED and "only the round's last checkpoint may leave it out" in report.reason


def test_a_committed_checkpoint_that_does_not_decode_fails(spec, trainer, replayer):
    cheated, published = build_round(spec, trainer=trainer)
    from trolly.compute.cheats import PublishedRound
    from trolly.compute.checkpoint_merkle import merkle_root
    import hashlib

    garbage = b"not a checkpoint"
    listing = list(published.listing)
    listing[2] = hashlib.sha256(garbage).hexdigest()
    broken = PublishedRound({**published.blobs, listing[2]: garbage}, tuple(listing),
                            merkle_root([bytes.fromhex(h) for h in listing]))
    report = verify(claim_for(cheated, broken, 1), spec, source_of(broken), replayer)
    assert report.outcome == FAILED and "does not decode" in report.reason


def test_same_profile_requires_identical_bytes_even_when_numbers_are_close(spec, honest, replayer, tolerant):
    cheated, _ = honest
    states = list(cheated.checkpoints)
    end = states[2]
    nudged = {n: t.clone() for n, t in end.weights.items()}
    first = sorted(nudged)[0]
    nudged[first].view(-1)[0] = torch.nextafter(nudged[first].view(-1)[0], torch.tensor(1.0))
    states[2] = dataclasses.replace(end, weights=nudged)
    tweaked = dataclasses.replace(cheated, checkpoints=tuple(states)).publish()
    same = verify(claim_for(cheated, tweaked, 1, own_profile()), spec, source_of(tweaked), replayer)
    other = verify(claim_for(cheated, tweaked, 1, foreign_profile()), spec, source_of(tweaked), tolerant)
    assert same.outcome == FAILED and same.comparison.mode == BITWISE
    assert other.outcome == PASSED and other.comparison.mode == TOLERANCE  # one ulp is honest drift


def test_evidence_is_canonical_and_leaves_timings_out(spec, honest, replayer):
    cheated, published = honest
    first = verify(claim_for(cheated, published, 1), spec, source_of(published), replayer)
    second = verify(claim_for(cheated, published, 1), spec, source_of(published), replayer)
    assert first.evidence_hash() == second.evidence_hash()
    assert b"seconds" not in first.evidence()


def test_claims_round_trip_through_their_own_json(spec, honest):
    cheated, published = honest
    claim = claim_for(cheated, published, 1)
    assert SegmentClaim.from_json(claim.to_json()) == claim
    assert claim.worker_bytes == bytes(range(1, 21))


def test_profile_ids_are_parsed_strictly():
    assert parse_profile("torch-2.13.0+cpu/threads-2/isa-avx2/deterministic-ftz") == ("2.13.0+cpu", 2, "avx2")
    for bad in ("", "torch-x/threads-0/isa-avx2/deterministic-ftz", "torch-x/threads-a/isa-avx2/deterministic-ftz",
                "torch-x/threads-1/avx2/deterministic-ftz", "torch-x/threads-1/isa-avx2",
                "torch-x/threads-1/isa-avx2/deterministic"):  # the mode before subnormals were flushed
        assert parse_profile(bad) is None


def test_replayer_runs_the_committed_profile_exactly_when_it_can(spec):
    replayer = Replayer()
    plan = replayer.plan(spec, own_profile().replace("threads-1", "threads-2"))
    assert (plan.where, plan.threads) == ("process", 2)
    weaker = "avx2" if replayer.instruction_set == "avx512" else "default"
    if replayer.instruction_set != "default":
        assert replayer.plan(spec, own_profile().replace(f"isa-{replayer.instruction_set}", f"isa-{weaker}")).where == "child"
    measuring = Replayer(children=False, tolerance_fallback=True)
    assert measuring.plan(spec, foreign_profile()).where == "tolerance"


@pytest.mark.parametrize("profile, message", [
    (f"torch-{torch.__version__}/threads-1/isa-avx512/deterministic-ftz", "not every verifier replays exactly"),
    (f"torch-{torch.__version__}/threads-65/isa-avx2/deterministic-ftz", "65 threads"),
])
def test_a_profile_not_every_verifier_replays_exactly_is_refused_even_where_it_runs(spec, honest, replayer, profile,
                                                                                   message):
    cheated, published = honest
    report = verify(claim_for(cheated, published, 1, profile), spec, source_of(published), replayer)
    assert report.outcome == FAILED and message in report.reason


def test_a_segment_this_verifier_cannot_replay_exactly_is_refused_not_judged_by_tolerance(spec, honest):
    """Issue 19 item 6: a verifier lacking the committed (accepted) instruction set votes FAIL rather than
    compare within a tolerance an fp16 cheat passes."""
    cheated, published = honest
    exact_only_here = Replayer(children=False)
    try:
        with pytest.raises(ProfileRefused, match="cannot replay instruction set"):
            exact_only_here.plan(spec, foreign_profile())
        report = verify(claim_for(cheated, published, 1, foreign_profile()), spec, source_of(published), exact_only_here)
        assert report.outcome == FAILED and report.comparison is None
    finally:
        exact_only_here.close()


@pytest.mark.parametrize("profile, message", [
    ("garbage", "not a profile id"),
    ("torch-1.0.0/threads-1/isa-avx2/deterministic-ftz", "torch 1.0.0"),
    (f"torch-{torch.__version__}/threads-1/isa-neon/deterministic-ftz", "unknown instruction set"),
])
def test_profiles_no_honest_worker_can_commit_fail(spec, honest, replayer, profile, message):
    cheated, published = honest
    report = verify(claim_for(cheated, published, 1, profile), spec, source_of(published), replayer)
    assert report.outcome == FAILED and message in report.reason


@pytest.mark.skipif(len(__import__("trolly.verifier.isa_child_replay", fromlist=["x"]).supported_instruction_sets(
    __import__("trolly.compute.determinism", fromlist=["x"]).current_instruction_set())) < 2,
    reason="this CPU supports no instruction set but its own (needs AVX2 or better)")
def test_a_worker_on_another_instruction_set_is_replayed_bitwise_in_a_child(spec):
    """Honest under ATEN_CPU_CAPABILITY=default (trained in a child), replayed bitwise in a verifier's child."""
    import json
    import subprocess
    import sys

    from trolly.compute.determinism import DeterminismProfile, child_environment

    script = (
        "import sys, json\n"
        "sys.path.insert(0, 'tests/helpers')\n"
        "from verifier_helpers import build_round, tiny_spec\n"
        "from trolly.compute.determinism import DeterminismProfile\n"
        "cheated, published = build_round(tiny_spec())\n"
        "sys.stdout.write(json.dumps({'listing': published.listing, 'root': published.checkpoint_root.hex(),\n"
        "  'blobs': {k: v.hex() for k, v in published.blobs.items()}, 'profile': DeterminismProfile(threads=1).id,\n"
        "  'steps': cheated.steps, 'samples': cheated.samples_processed, 'start': cheated.start_weights_hash.hex(),\n"
        "  'update': published.update_hash.hex(), 'residual': published.residual_hash.hex()}))\n")
    environment = child_environment(DeterminismProfile(threads=1, instruction_set="default"))
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                               timeout=300, check=True,
                               cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    played = json.loads(completed.stdout)
    assert "isa-default" in played["profile"]
    source = MemorySource({k: bytes.fromhex(v) for k, v in played["blobs"].items()}, {(1, 1): played["listing"]})
    replayer = Replayer()
    try:
        for segment in range(len(played["listing"]) - 1):
            claim = SegmentClaim(1, 1, "w", 1, segment, bytes.fromhex(played["root"]), len(played["listing"]),
                                 played["steps"], played["samples"], bytes.fromhex(played["start"]), played["profile"],
                                 update_hash=bytes.fromhex(played["update"]),
                                 residual_hash=bytes.fromhex(played["residual"]))
            report = verify(claim, spec, source, replayer)
            assert report.outcome == PASSED and report.comparison.mode == BITWISE, report.reason
            assert report.details["replay_profile"] == played["profile"]
    finally:
        replayer.close()


def gpu_claimed(profile: str) -> str:
    """`profile` (a CPU profile id) as a GPU profile of a GPU this verifier does not have."""
    parts = profile.split("/")
    return "/".join([*parts[:3], "gpu-NVIDIA-H100-80GB-HBM3+driver-550.54.15+cuda-12.4", parts[3]])


@pytest.mark.parametrize("cheat", [None, "bf16", "other_data"])
def test_a_gpu_segment_judged_on_a_cpu_passes_within_the_tolerance_and_a_cheat_fails(spec, trainer, replayer, cheat):
    """The whole validator set's check of a disputed GPU segment (issue 32 item 1): a verifier without the GPU
    replays the profile's CPU part and judges within the tolerance (here the bytes were made on this CPU, so the
    honest drift is nil; a GPU's own drift is what docs/security.md says is assumed to stay inside it)."""
    cheated, published = build_round(spec, cheat, trainer=trainer) if cheat else build_round(spec, trainer=trainer)
    replayer.gpu = None
    segments = sorted(cheated.faked_segments) if cheat else range(len(published.listing) - 1)
    for segment in segments:
        report = verify(claim_for(cheated, published, segment, gpu_claimed(own_profile())), spec, source_of(published),
                        replayer, expected_start_hash=expected_start(spec))
        if cheat:
            assert report.outcome != PASSED, f"{cheat} segment {segment} passed: {report.reason}"
        else:
            assert report.outcome == PASSED and report.comparison.mode == TOLERANCE, report.reason
