"""The inner learning-rate schedule: its values, its spec field's validation, and that the worker trains with
it and a verifier's replay of a scheduled segment is byte-identical."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys

import pytest

from trolly.compute.checkpoints import decode_checkpoint, encode_checkpoint
from trolly.compute.errors import SpecError
from trolly.compute.lr_schedule import half_cosine, inner_lr
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, run_round, segment_bounds, train_segment
from trolly.verifier.segment_check import FAILED, PASSED, Replayer, verify_segment

from verifier_helpers import (build_round, claim_for, digits, expected_start, source_of, tiny_spec,
                              tiny_spec_document)

HASH = "ab" * 32
COSINE = {"name": "cosine", "warmup_steps": 10, "final_lr": 0.0001}


def training_with(schedule=None, rounds=4, inner_steps=50, lr=0.001):
    document = example_spec(HASH)
    document["training"].update(rounds=rounds, inner_steps=inner_steps)
    document["training"]["inner_optimizer"]["lr"] = lr
    if schedule is not None:
        document["training"]["inner_optimizer"]["schedule"] = schedule
    return spec_from_dict(document).training


def every_lr(training):
    return [inner_lr(training, r, s) for r in range(training.rounds) for s in range(training.inner_steps)]


def test_a_spec_without_a_schedule_keeps_the_constant_lr_at_every_step():
    training = training_with()
    assert training.inner_optimizer.schedule.name == "constant"
    assert every_lr(training) == [0.001] * 200
    assert every_lr(training_with({"name": "constant"})) == [0.001] * 200


def test_warm_up_rises_linearly_to_the_lr_then_holds_it():
    lrs = every_lr(training_with({"name": "constant", "warmup_steps": 4}))
    assert lrs[:5] == [0.001 * 1 / 4, 0.001 * 2 / 4, 0.001 * 3 / 4, 0.001, 0.001]
    assert set(lrs[3:]) == {0.001}


@pytest.mark.parametrize("name", ["cosine", "linear"])
def test_decay_runs_over_the_whole_task_from_the_lr_to_the_final_lr(name):
    training = training_with({"name": name, "warmup_steps": 10, "final_lr": 0.0001})
    lrs = every_lr(training)
    assert lrs[9] == 0.001 and lrs[10] == 0.001  # end of warm-up, start of decay
    assert lrs[-1] == 0.0001  # the task's last step (round 3, step 49)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    progress = 94 / 189  # step 104: 94 steps into a decay over steps 10..199
    expected = 0.0001 + 0.0009 * (1 - progress if name == "linear" else (1 + math.cos(math.pi * progress)) / 2)
    assert lrs[104] == pytest.approx(expected, rel=1e-12)
    # progress is the task's nominal step: round 1 step 0 continues where round 0 ended
    assert inner_lr(training, 1, 0) == lrs[50]


def test_half_cosine_is_the_cosine_within_a_few_ulps_and_refuses_progress_outside_0_1():
    for i in range(1001):
        p = i / 1000
        assert abs(half_cosine(p) - (1 + math.cos(math.pi * p)) / 2) < 1e-15
    assert half_cosine(0.0) == 1.0 and half_cosine(1.0) < 1e-30
    with pytest.raises(ValueError):
        half_cosine(1.5)


# The schedule's floats are part of what a verifier replays, so they must not depend on the machine: these
# are the exact bits (float.hex) on the machine that wrote the test; a libm cosine could differ in the last bit.
PINNED = {(0, 0): "0x1.a36e2eb1c432dp-14", (0, 37): "0x1.f4ec72a9b2618p-11", (1, 13): "0x1.b680f3b13731bp-11",
          (3, 49): "0x1.a36e2eb1c432dp-14"}


def test_scheduled_lrs_are_pinned_bit_for_bit():
    training = training_with(COSINE)
    assert {key: inner_lr(training, *key).hex() for key in PINNED} == PINNED


def test_another_process_computes_the_same_bits():
    script = ("from trolly.compute.lr_schedule import inner_lr\n"
              "from trolly.compute.spec import example_spec, spec_from_dict\n"
              "d = example_spec('ab' * 32)\n"
              "d['training']['inner_optimizer']['schedule'] = {'name': 'cosine', 'warmup_steps': 10, 'final_lr': 0.0001}\n"
              "t = spec_from_dict(d).training\n"
              "print(' '.join(inner_lr(t, r, s).hex() for r in range(t.rounds) for s in range(t.inner_steps)))\n")
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": "7"}, timeout=120).stdout.split()
    assert output == [lr.hex() for lr in every_lr(training_with(COSINE))]


@pytest.mark.parametrize("schedule, message", [
    ({"name": "step"}, "schedule.name must be one of"),
    ({"warmup_steps": 3}, "missing name"),
    ({"name": "cosine", "warmup_steps": -1}, "warmup_steps must be a non-negative integer"),
    ({"name": "cosine", "warmup_steps": 2.0}, "warmup_steps must be a non-negative integer"),
    ({"name": "cosine", "warmup_steps": True}, "warmup_steps must be a non-negative integer"),
    ({"name": "cosine", "warmup_steps": 201}, "at most the task's 200 steps"),
    ({"name": "cosine", "final_lr": 0.002}, "final_lr must be at most training.inner_optimizer.lr"),
    ({"name": "linear", "final_lr": -0.1}, r"final_lr must be in \[0.0, 10.0\)"),
    ({"name": "constant", "final_lr": 0.0001}, "only for a decaying schedule"),
    ({"name": "cosine", "floor": 0.0001}, "unknown field"),
    ("cosine", "schedule must be a JSON object"),
])
def test_bad_schedules_are_refused_with_the_field_named(schedule, message):
    with pytest.raises(SpecError, match=message):
        training_with(schedule)


def test_the_worker_trains_each_step_with_the_scheduled_lr():
    spec = tiny_spec(inner_optimizer={"name": "adamw", "lr": 0.001, "schedule": COSINE}, rounds=2)
    trainer = Trainer(spec, digits())
    trainer.start_round(initial_weights(spec, digits().shape))
    for step in range(7):
        trainer.train_step(worker_index=0, round_index=1)
        assert trainer.optimizer.param_groups[0]["lr"] == inner_lr(spec.training, 1, step)
    assert inner_lr(spec.training, 1, 6) != 0.001


def test_a_scheduled_round_differs_from_the_same_round_at_a_constant_lr():
    scheduled = tiny_spec(inner_optimizer={"name": "adamw", "lr": 0.001, "schedule": COSINE}, rounds=2)
    constant = tiny_spec(inner_optimizer={"name": "adamw", "lr": 0.001}, rounds=2)
    results = [run_round(Trainer(spec, digits()), initial_weights(spec, digits().shape), worker_index=0,
                         round_index=1, steps=12) for spec in (scheduled, constant)]
    assert results[0].checkpoint_root != results[1].checkpoint_root


def test_replaying_every_scheduled_segment_gives_the_next_checkpoint_byte_for_byte():
    spec = tiny_spec(inner_optimizer={"name": "adamw", "lr": 0.001, "schedule": COSINE}, rounds=3)
    result = run_round(Trainer(spec, digits()), initial_weights(spec, digits().shape), worker_index=2, round_index=1,
                       steps=12, keep_bytes=True)
    verifier = Trainer(spec, digits())
    for segment in reversed(range(len(result.checkpoints) - 1)):  # out of order, as a verifier samples them
        _, end = segment_bounds(segment, 12, spec.training.checkpoint_every)
        replayed = train_segment(verifier, decode_checkpoint(result.checkpoints[segment].data), worker_index=2,
                                 round_index=1, end_step=end, final=end == 12)
        assert encode_checkpoint(replayed) == result.checkpoints[segment + 1].data


def test_the_verifier_passes_a_scheduled_round_and_fails_it_under_a_spec_without_the_schedule():
    document = tiny_spec_document(digits().manifest_hash, rounds=3)
    document["training"]["inner_optimizer"]["schedule"] = COSINE
    scheduled = spec_from_dict(document)
    cheated, published = build_round(scheduled)
    unscheduled = tiny_spec(rounds=3)
    replayer = Replayer()
    try:
        # spec_key: the replayer keeps one trainer per spec (by its hash in the service)
        for spec, key, outcome in ((scheduled, "scheduled", PASSED), (unscheduled, "constant", FAILED)):
            report = asyncio.run(verify_segment(claim_for(cheated, published, 1), spec, digits(), source_of(published),
                                                replayer, expected_start_hash=expected_start(spec), spec_key=key))
            assert report.outcome == outcome, report.reason
    finally:
        replayer.close()
