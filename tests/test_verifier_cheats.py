"""The cheat registry: built-in classes, honest rounds equal to the worker's own, modules loaded from files."""

from __future__ import annotations

import pytest
import torch

from trolly.compute.checkpoints import checkpoint_hash
from trolly.compute.spec import spec_from_dict
from trolly.compute.training import Trainer, run_round, train_segment
from trolly.verifier.cheats import CHEATS, get_cheat, load_cheat_module, register_cheat
from trolly.verifier.cheats.registry import CheatContext
from trolly.verifier.cheats.training import cheat_steps
from trolly.verifier.errors import CheatError

from verifier_helpers import build_round, digits, round_weights, tiny_spec, tiny_spec_document

ISSUE_CLASSES = {"skipped_steps", "interpolated", "fewer_steps", "half_batch", "other_data", "bf16", "fp16",
                 "changed_lr", "copied_update", "replayed_round", "random_weights", "withheld"}


def test_every_class_named_by_the_issue_is_registered():
    assert ISSUE_CLASSES <= set(CHEATS)


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


def test_a_cheat_module_file_adds_strategies(tmp_path):
    module = tmp_path / "my_cheats.py"
    module.write_text(
        "import dataclasses\n"
        "from trolly.verifier.cheats import register_cheat, honest_round\n"
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
    from trolly.verifier.cheats import choose_faked_segments

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
