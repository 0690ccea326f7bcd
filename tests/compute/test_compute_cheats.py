"""The one cheat registry (`compute/cheats/`): built-in classes, honest rounds equal to the worker's own, modules
loaded from files, and every cheat played through a worker's round (`compute/worker/cheat_round.py`) and caught
there. The benchmark's path plays every cheat in tests/verifier/test_verifier_segment_check.py and
test_verifier_benchmark.py."""

from __future__ import annotations

import pytest
import torch

from trolly.compute.checkpoints import checkpoint_hash, weights_hash
from trolly.compute.spec import spec_from_dict
from trolly.compute.training import Trainer, run_round, train_segment
from trolly.compute.cheats import CHEATS, CheatContext, get_cheat, load_cheat_module, register_cheat
from trolly.compute.cheats.distortions import cheat_steps
from trolly.compute.errors import CheatError
from trolly.verifier.segment_check import PASSED, SegmentClaim

import cheat_helpers
from cheat_helpers import cheat_worker, replay_round_one
from verifier_helpers import build_round, digits, own_profile, round_weights, tiny_spec, tiny_spec_document

ISSUE_CLASSES = {"skipped_steps", "interpolated", "fewer_steps", "half_batch", "other_data", "bf16", "fp16",
                 "changed_lr", "copied_update", "replayed_round", "random_weights", "withheld"}
WORKER_SWITCHES = {"skipped_steps", "forged_update", "garbage_blobs"}
"""The cheats the worker's `--cheat` switch had before the registries were one (under other names then)."""


def test_every_class_named_by_the_issue_is_registered_once_in_snake_case():
    assert ISSUE_CLASSES | WORKER_SWITCHES <= set(CHEATS)
    assert all(name == entry.name and name.replace("_", "").isalnum() for name, entry in CHEATS.items())
    assert "honest" not in CHEATS  # the baseline (`honest_round`), not a cheat


def test_the_honest_strategy_is_bitwise_the_workers_own_round():
    spec = tiny_spec()
    trainer = Trainer(spec, digits())
    honest, published = build_round(spec, trainer=trainer)
    reference = run_round(trainer, round_weights(spec, 1), worker_index=1, round_index=1, steps=spec.training.inner_steps)
    assert [bytes.fromhex(h) for h in published.listing] == reference.checkpoint_hashes
    assert published.checkpoint_root == reference.checkpoint_root
    assert honest.samples_processed == reference.samples_processed and not honest.faked_segments


def test_a_segment_cheat_leaves_the_segments_it_does_not_fake_honest():
    spec = tiny_spec(inner_steps=15)
    trainer = Trainer(spec, digits())
    honest, _ = build_round(spec, trainer=trainer)
    cheated, _ = build_round(spec, "bf16", faked={1}, trainer=trainer)
    assert cheated.faked_segments == {1}
    assert all(torch.equal(honest.checkpoints[1].weights[n], cheated.checkpoints[1].weights[n]) for n in honest.checkpoints[1].weights)
    assert not all(torch.equal(honest.checkpoints[2].weights[n], cheated.checkpoints[2].weights[n]) for n in honest.checkpoints[2].weights)
    assert [c.step for c in cheated.checkpoints] == [c.step for c in honest.checkpoints]


def test_withheld_checkpoints_are_listed_but_not_served():
    cheated, published = build_round(tiny_spec(), "withheld", faked={0})
    assert cheated.withheld == {1}
    assert published.listing[1] not in published.blobs and published.listing[0] in published.blobs


def test_unknown_and_duplicate_names_are_refused():
    with pytest.raises(CheatError, match="unknown cheat"):
        get_cheat("no-such-cheat")
    with pytest.raises(CheatError, match="already registered"):
        register_cheat("bf16", "again")(lambda context: None)
    with pytest.raises(CheatError):
        register_cheat("bad name!", "spaces")
    with pytest.raises(CheatError):
        register_cheat("skip-steps", "one spelling per cheat: snake_case")


def test_a_cheat_module_file_adds_strategies(tmp_path):
    module = tmp_path / "my_cheats.py"
    module.write_text(
        "import dataclasses\n"
        "from trolly.compute.cheats import register_cheat, honest_round\n"
        "@register_cheat('test_double_claim', 'honest round claiming twice the steps')\n"
        "def double(context):\n"
        "    round_ = honest_round(context)\n"
        "    return dataclasses.replace(round_, steps=2 * round_.steps, faked_segments=frozenset({0}))\n")
    try:
        assert load_cheat_module(module) == ["test_double_claim"]
        cheated, _ = build_round(tiny_spec(), "test_double_claim")
        assert cheated.steps == 2 * tiny_spec().training.inner_steps
    finally:
        CHEATS.pop("test_double_claim", None)


@pytest.mark.parametrize("text, message", [
    ("raise RuntimeError('boom')\n", "failed to load"),
    ("x = 1\n", "registered no cheat"),
])
def test_broken_cheat_modules_are_reported(tmp_path, text, message):
    module = tmp_path / "broken.py"
    module.write_text(text)
    with pytest.raises(CheatError, match=message):
        load_cheat_module(module)
    with pytest.raises(CheatError, match="does not exist"):
        load_cheat_module(tmp_path / "missing.py")


def test_a_worker_chooses_a_fraction_of_its_segments_to_fake():
    from trolly.compute.cheats import choose_faked_segments

    chosen = choose_faked_segments(10, 0.3, torch.Generator().manual_seed(1))
    assert len(chosen) == 3 and all(0 <= s < 10 for s in chosen)
    assert len(choose_faked_segments(3, 0.01, torch.Generator().manual_seed(1))) == 1
    with pytest.raises(CheatError):
        choose_faked_segments(3, 0.0, torch.Generator())


def test_the_cheats_loop_undistorted_is_the_honest_loop_schedule_included():
    """`cheat_steps` with no distortion gives the honest segment's bytes, on a spec with an lr schedule: only
    a cheat's distortion sets it apart (and `lr_scale` scales the scheduled lr of each step)."""
    document = tiny_spec_document(digits().manifest_hash, rounds=2, inner_steps=10)
    document["training"]["inner_optimizer"]["schedule"] = {"name": "cosine", "warmup_steps": 3, "final_lr": 0.0001}
    spec = spec_from_dict(document)
    trainer = Trainer(spec, digits())
    start = round_weights(spec, 1)

    def play(**distortion) -> bytes:
        trainer.start_round(start)
        context = CheatContext(trainer, start, 1, 1, 10, frozenset(), torch.Generator().manual_seed(0))
        return checkpoint_hash(cheat_steps(context, 0, 5, **distortion))

    trainer.start_round(start)
    honest = checkpoint_hash(train_segment(trainer, None, worker_index=1, round_index=1, end_step=5))
    assert play() == honest
    assert play(lr_scale=2.0) != honest


# ---- every cheat through a worker's round ---------------------------------------------------------------------


def play_worker_round(name, spec, trainer, state, store, round_index):
    """Round `round_index` of task 7 played by the cheat `name` on digits, committed under this machine's profile."""
    return cheat_helpers.play_worker_round(name, spec, digits(), trainer, state, store, round_index, own_profile())


def test_a_worker_cannot_replay_a_previous_round_in_its_first(tmp_path):
    spec = tiny_spec()
    state, store = cheat_worker(tmp_path)
    with pytest.raises(CheatError, match="previous round"):
        play_worker_round("replayed_round", spec, Trainer(spec, digits()), state, store, 0)


ROUND_CHEATS = sorted(name for name, cheat in CHEATS.items() if cheat.final is None)
"""The cheats on training rounds; the ones on the final report (`forged_final`) train every round honestly."""


@pytest.mark.parametrize("name", ROUND_CHEATS)
def test_every_cheat_plays_a_worker_round_that_the_verifier_catches(tmp_path, name):
    """Round 1 of a worker started with `--cheat NAME` (after a round 0 it played with the same cheat, or with
    another for the cheat that replays it), served from its blob store: the verifier passes none of its
    segments (`fewer_steps` trains the first half of the round honestly: only its later segments fail)."""
    spec = tiny_spec()
    trainer, (state, store) = Trainer(spec, digits()), cheat_worker(tmp_path)
    play_worker_round("skipped_steps" if name == "replayed_round" else name, spec, trainer, state, store, 0)
    message = play_worker_round(name, spec, trainer, state, store, 1)
    outcomes = [report.outcome for report in replay_round_one(spec, digits(), state, store, message, "worker-path")]
    caught = [outcome != PASSED for outcome in outcomes]
    assert caught == ([False] * (len(caught) - 1) + [True] if name == "fewer_steps" else [True] * len(caught)), outcomes


def test_a_forged_final_report_is_caught_and_the_honest_one_passes():
    """`forged_final` reports another hash than the final weights it holds; the verifier's final report check
    (`verifier/final_report.py`) compares the report with the W_R it derives itself."""
    from trolly.verifier.final_report import verify_final_report

    derived = weights_hash(round_weights(tiny_spec(), 1))
    forged = CHEATS["forged_final"].final(derived)

    def report(reported):
        claim = SegmentClaim(task_id=7, round=2, worker="worker-1", worker_index=1, segment=0, checkpoint_root=b"",
                             num_checkpoints=0, steps=0, samples_processed=0, start_weights_hash=reported,
                             determinism_profile="")
        return verify_final_report(claim, derived)

    assert forged != derived and report(forged).outcome == "fail" and "are not W_R" in report(forged).reason
    assert report(derived).outcome == PASSED
    assert report(forged).details["replay_digest"] == report(derived).details["replay_digest"]  # commits to W_R
