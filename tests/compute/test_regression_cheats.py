"""Every cheat of the registry (`compute/cheats/`) on a regression task (issue 34 item 3): played through a
worker's round (`compute/worker/cheat_round.py`) on a packed table whose target is a number, and caught by the
verifier's segment replay. The verifier replays through the same `Trainer` (its loss the mean squared error for
regression), so it needs no case of its own: this test is the proof that none is missing."""

from __future__ import annotations

import functools
import json
import pathlib

import numpy as np
import pytest
import torch

from requester_helpers import write_csv
from trolly.compute.checkpoints import weights_hash
from trolly.compute.cheats import CHEATS, honest_round, register_cheat
from trolly.compute.data.manifest import dataset_from_blobs
from trolly.compute.data.packing import pack_file
from trolly.compute.spec import example_spec, parse_spec
from trolly.compute.training import Trainer
from trolly.verifier.final_report import verify_final_report
from trolly.verifier.segment_check import PASSED, SegmentClaim

import cheat_helpers
from cheat_helpers import cheat_worker, replay_round_one, stand_in_weights
from verifier_helpers import own_profile

ROUND_CHEATS = sorted(name for name, cheat in CHEATS.items() if cheat.final is None)
FINAL_CHEATS = sorted(name for name, cheat in CHEATS.items() if cheat.final is not None)


@functools.lru_cache(maxsize=1)
def regression_data(directory: str):
    """A public regression pack of a seeded table (three number columns, a word column, a number to predict)."""
    generator = np.random.default_rng(5)
    rows = []
    for i in range(200):
        x, y, z = (round(float(v), 3) for v in generator.normal(0, [1, 10, 100]))
        city = ["north", "south"][i % 2]
        rows.append((x, y, z, city, round(2 * x - 0.1 * y + 0.01 * z + (1.5 if city == "north" else 0), 3)))
    source = write_csv(pathlib.Path(directory) / "table.csv", rows, header="x,y,z,city,value")
    blobs, _, _ = pack_file(source, task="regression")
    return dataset_from_blobs(blobs)


@pytest.fixture
def regression(tmp_path_factory):
    dataset = regression_data(str(tmp_path_factory.getbasetemp()))
    assert dataset.shape.kind == "regression" and dataset.train_targets.dtype == torch.float32
    document = example_spec(dataset.manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}},
                            dataset={"name": "packed", "manifest_hash": dataset.manifest_hash, "input_size":
                                     dataset.shape.input_size, "num_classes": 1, "task": "regression"})
    document["training"].update({"inner_steps": 12, "checkpoint_every": 5, "batch_size": 8})
    return parse_spec(json.dumps(document)), dataset


def play_worker_round(name, spec, dataset, trainer, state, store, round_index):
    """Round `round_index` of task 7 played by the cheat `name`, committed under this machine's profile."""
    return cheat_helpers.play_worker_round(name, spec, dataset, trainer, state, store, round_index, own_profile())


def replay_outcomes(spec, dataset, state, store, message) -> list[str]:
    """The verifier's outcome on every segment of round 1 of task 7."""
    return [report.outcome for report in replay_round_one(spec, dataset, state, store, message, "regression")]


def test_an_honest_regression_round_passes_every_segment(tmp_path, regression):
    spec, dataset = regression
    trainer = Trainer(spec, dataset)
    state, store = cheat_worker(tmp_path)
    register_cheat("test_honest_regression", "an honest round, through the cheat path")(honest_round)
    try:
        play_worker_round("test_honest_regression", spec, dataset, trainer, state, store, 0)
        message = play_worker_round("test_honest_regression", spec, dataset, trainer, state, store, 1)
    finally:
        CHEATS.pop("test_honest_regression", None)
    assert replay_outcomes(spec, dataset, state, store, message) == [PASSED] * 3


@pytest.mark.parametrize("name", ROUND_CHEATS)
def test_every_cheat_on_a_regression_task_is_caught(tmp_path, regression, name):
    """Attack: each way of faking a round in the registry, played on a regression task (mean squared error
    on a float target), where a verifier that special-cased classification would let it through. None of its
    segments passes (`fewer_steps` trains the first half of the round honestly: only its later ones fail)."""
    spec, dataset = regression
    trainer = Trainer(spec, dataset)
    state, store = cheat_worker(tmp_path)
    play_worker_round("skipped_steps" if name == "replayed_round" else name, spec, dataset, trainer, state, store, 0)
    message = play_worker_round(name, spec, dataset, trainer, state, store, 1)
    caught = [outcome != PASSED for outcome in replay_outcomes(spec, dataset, state, store, message)]
    assert caught == ([False] * (len(caught) - 1) + [True] if name == "fewer_steps" else [True] * len(caught))


@pytest.mark.parametrize("name", FINAL_CHEATS)
def test_a_forged_final_report_on_a_regression_task_is_caught(regression, name):
    spec, dataset = regression
    derived = weights_hash(stand_in_weights(spec, dataset, 1))
    forged = CHEATS[name].final(derived)
    claim = SegmentClaim(task_id=7, round=2, worker="worker-1", worker_index=1, segment=0, checkpoint_root=b"",
                         num_checkpoints=0, steps=0, samples_processed=0, start_weights_hash=forged,
                         determinism_profile="")
    assert forged != derived and verify_final_report(claim, derived).outcome == "fail"
