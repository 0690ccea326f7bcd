"""Verification unchanged in strength for a tab (issue 37 item 3): every cheat of the registry has a browser twin in
the page's code (console/web/src/browser_worker/cheats.js), and each twin is caught as its native twin is.

For every round cheat, a native `--kernel wasm32` worker plays it (round 0, then round 1, as
tests/compute/wasm/test_wasm_replay.py plays it) and the page's round code plays its twin in Node.js on the same
task, data and start weights (cheat_round_run.mjs: the kernel's segments, the listing, blobs and commitment the
protocol pushes and commits). Each round 1 goes to the same verifier replay (cheat_helpers.replay_round_one),
served from a worker's store: the verdicts per segment must be the native cheat's, and, where the lie is a
function of an honest kernel round (no torch step, no random draw), the checkpoints, update and claims must be
the native cheater's byte for byte. A twin missing from the page fails the first test; the final report's forgery
gives Python's forged hash, which the verifier's final check refuses."""

from __future__ import annotations

import base64
import json
import subprocess

import numpy as np
import pytest

from trolly.compute.checkpoints import weights_hash
from trolly.compute.cheats import CHEATS
from trolly.compute.wasm.profile import PROFILE_ID
from trolly.compute.wasm.segment import parameter_shapes
from trolly.compute.wasm.trainer import WasmKernelTrainer
from trolly.compute.worker.round_training import commitment
from trolly.verifier.final_report import verify_final_report
from trolly.verifier.segment_check import PASSED, SegmentClaim

import cheat_helpers
from cheat_helpers import TASK_ID, cheat_worker, digits_dataset, replay_round_one, stand_in_weights, \
    wasm32_digits_document, wasm32_digits_spec
from wasm_helpers import NODE, ROOT, floats_b64

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

SCRIPT = ROOT / "tests" / "console" / "browser_worker" / "cheat_round_run.mjs"
ROUND_CHEATS = sorted(name for name, cheat in CHEATS.items() if cheat.final is None)
FINAL_CHEATS = sorted(name for name, cheat in CHEATS.items() if cheat.final is not None)
SAME_BYTES = {"withheld", "fewer_steps", "inflated_samples", "copied_update", "forged_update", "garbage_blobs"}
"""Twins whose lie is a function of the kernel's honest steps alone: their bytes are the native cheater's."""


def page_cheat_names() -> list[str]:
    script = ("import('./console/web/src/browser_worker/cheats.js')"
              ".then((m) => console.log(JSON.stringify(Object.keys(m.CHEATS))))")
    done = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_cheat_of_the_registry_has_a_browser_twin():
    """A cheat added to the registry without its twin in the page would leave tabs' verification untested."""
    assert sorted(page_cheat_names()) == sorted(CHEATS)


def flat(weights, sizes) -> str:
    return floats_b64(np.concatenate([weights[name].numpy().ravel() for name, _ in parameter_shapes(sizes)]))


def round_zero_cheat(name: str) -> str:
    """The cheat round 0 is played with: a replay needs an earlier round, which test_wasm_replay fakes too."""
    return "skipped_steps" if name == "replayed_round" else name


def play_in_node(tmp_path, name: str, kind: str = "wasm") -> dict:
    """Rounds 0 and 1 of task 7 (worker index 1) played by the page's twin of `name` in Node.js."""
    spec, dataset = wasm32_digits_spec(), digits_dataset()
    sizes = WasmKernelTrainer(spec, dataset).kernel.sizes
    rounds = []
    for index, cheat in ((0, round_zero_cheat(name)), (1, name)):
        start = stand_in_weights(spec, dataset, index)
        rounds.append({"round": index, "cheat": cheat, "startWeights": flat(start, sizes),
                       "startHash": weights_hash(start).hex()})
    description = {
        "specText": json.dumps(wasm32_digits_document()), "kind": kind, "workerIndex": 1, "rounds": rounds,
        "shape": {"inputSize": dataset.shape.input_size, "numClasses": dataset.shape.num_classes},
        "inputs": floats_b64(dataset.train_inputs.numpy()), "testInputs": floats_b64(dataset.test_inputs.numpy()),
        "targets": base64.b64encode(dataset.train_targets.numpy().astype("<u4").tobytes()).decode(),
        "testTargets": base64.b64encode(dataset.test_targets.numpy().astype("<u4").tobytes()).decode(),
        "finalHash": "ab" * 32,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(description))
    done = subprocess.run([NODE, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def record_tab_rounds(directory, played: dict):
    """The tab's rounds as a worker's store and progress hold them (what its relay serves, what it committed):
    the store and state replay_round_one reads, and round 1's commitment."""
    state, store = cheat_worker(directory)
    task = state.task(TASK_ID)
    for index, presented in enumerate(played["rounds"]):
        for digest, data in presented["blobs"].items():
            assert store.put(base64.b64decode(data)) == digest
        progress, commit = task.round(index), presented["commit"]
        progress.steps, progress.checkpoints = commit["steps"], presented["listing"]
        progress.start_weights_hash = commit["startWeightsHash"]
        progress.update_hash, progress.residual_hash = commit["updateHash"], commit["residualHash"]
    presented = played["rounds"][1]
    commit = presented["commit"]
    message = commitment(TASK_ID, task.round(1), 8, commit["determinismProfile"], commit["samplesProcessed"])
    assert message.checkpoint_root.hex() == commit["checkpointRoot"]  # the tab's root is the one replayed against
    assert message.num_checkpoints == commit["numCheckpoints"] == len(presented["listing"])
    assert not any(store.has(digest) for digest in presented["withheld"])
    return state, store, message


def native_rounds(directory, name: str):
    """Rounds 0 and 1 played by the native cheat on the wasm32 kernel, as test_wasm_replay plays them."""
    spec, dataset = wasm32_digits_spec(), digits_dataset()
    state, store = cheat_worker(directory)
    trainer = WasmKernelTrainer(spec, dataset)
    cheat_helpers.play_worker_round(round_zero_cheat(name), spec, dataset, trainer, state, store, 0, PROFILE_ID)
    message = cheat_helpers.play_worker_round(name, spec, dataset, trainer, state, store, 1, PROFILE_ID)
    return state, store, message


def outcomes(state, store, message) -> list[str]:
    return [report.outcome for report in
            replay_round_one(wasm32_digits_spec(), digits_dataset(), state, store, message, "wasm32")]


@pytest.mark.parametrize("name", ROUND_CHEATS)
def test_each_browser_twin_is_caught_as_its_native_cheat(tmp_path, name):
    """Attack: each way of faking a round in the registry, told by a tab through the page's round code (a cheating
    mode of the page, test only). The verifier's verdict on every segment is the native cheater's: every segment
    fails (`fewer_steps`: only its later ones, its first half trained honestly)."""
    tab = record_tab_rounds(tmp_path / "tab", play_in_node(tmp_path, name))
    native = native_rounds(tmp_path / "native", name)
    caught = [outcome != PASSED for outcome in outcomes(*tab)]
    assert caught == [outcome != PASSED for outcome in outcomes(*native)]
    assert caught == ([False] * (len(caught) - 1) + [True] if name == "fewer_steps" else [True] * len(caught))
    tab_message, native_message = tab[2], native[2]
    assert tab_message.determinism_profile == native_message.determinism_profile == PROFILE_ID
    assert tab_message.samples_processed == native_message.samples_processed  # the same claims
    assert tab_message.steps == native_message.steps
    if name in SAME_BYTES:  # the same lie to the byte: the same listing, update and root
        assert tab[0].task(TASK_ID).round(1).checkpoints == native[0].task(TASK_ID).round(1).checkpoints
        assert tab_message == native_message
    if name != "arbitrary_start":
        assert tab_message.start_weights_hash == native_message.start_weights_hash  # W_r claimed as its start


def test_an_honest_tab_round_passes_every_segment_and_is_the_native_workers(tmp_path):
    """The comparison above is worth something only if the honest page round passes: the same bytes, every segment
    replayed bit for bit."""
    from trolly.compute.cheats import honest_round, register_cheat

    register_cheat("test_honest_tab", "an honest round, through the cheat path")(honest_round)
    try:
        native = native_rounds(tmp_path / "native", "test_honest_tab")
    finally:
        CHEATS.pop("test_honest_tab", None)
    played = play_in_node(tmp_path, "", kind="js")
    tab = record_tab_rounds(tmp_path / "tab", played)
    assert tab[2] == native[2]
    assert outcomes(*tab) == [PASSED] * 3


@pytest.mark.parametrize("name", FINAL_CHEATS)
def test_a_tabs_forged_final_report_is_pythons_and_is_caught(name):
    """Attack: a tab reporting final weights of its own choosing (the page's `forged_final`): the hash it commits
    is the native forger's for the same true hash, and the verifier's final check fails it."""
    true_hash = weights_hash(stand_in_weights(wasm32_digits_spec(), digits_dataset(), 1))
    script = ("import('./console/web/src/browser_worker/cheats.js').then((m) => console.log("
              f"m.cheatPlan({json.dumps(name)}).round.finalHash({json.dumps(true_hash.hex())})))")
    done = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    forged = bytes.fromhex(done.stdout.strip())
    assert forged == CHEATS[name].final(true_hash) != true_hash
    claim = SegmentClaim(task_id=TASK_ID, round=2, worker="worker-1", worker_index=1, segment=0, checkpoint_root=b"",
                         num_checkpoints=0, steps=0, samples_processed=0, start_weights_hash=forged,
                         determinism_profile="")
    assert verify_final_report(claim, true_hash).outcome == "fail"
