"""A browser worker's round (console/web/src/browser_worker/round_segments.js, what the page's Web Worker runs)
gives the checkpoints a native `--kernel wasm32` worker commits for the same round, byte for byte: Python trains
the round with `WasmKernelTrainer` through the worker's round loop, Node.js with the page's code on the .wasm
and on the JavaScript twin, from the same spec text (its seed past 2^53 read exactly), data and W_r. The page's
test-only cheats make other checkpoints than the honest round's, from the first trained segment on."""

from __future__ import annotations

import base64
import json
import subprocess

import numpy as np
import pytest

from wasm_helpers import NODE, ROOT, floats_b64, small_dataset, vector_spec_document

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

SCRIPT = ROOT / "tests" / "console" / "browser_worker" / "round_run.mjs"
STEPS = 19
"""Three segments of the spec's 8 steps, the last one short: the round's last checkpoint is a final one."""


@pytest.fixture(scope="module")
def native_round():
    from trolly.compute.data import build_dataset, dataset_from_blobs
    from trolly.compute.spec import spec_from_dict
    from trolly.compute.training import initial_weights, run_round
    from trolly.compute.wasm.segment import parameter_shapes
    from trolly.compute.wasm.trainer import WasmKernelTrainer

    document = vector_spec_document("00" * 32)
    document["determinism"] = {"threads": 1, "kernels": ["torch", "wasm32"]}
    digits = dataset_from_blobs(build_dataset("digits"))
    document["dataset"]["manifest_hash"] = digits.manifest_hash
    spec_text = json.dumps(document)
    spec = spec_from_dict(document)
    dataset = small_dataset(digits, 128)
    trainer = WasmKernelTrainer(spec, dataset)
    start = initial_weights(spec, dataset.shape)
    result = run_round(trainer, start, worker_index=1, round_index=2, steps=STEPS)
    flat = np.concatenate([start[name].numpy().ravel() for name, _ in parameter_shapes(trainer.kernel.sizes)])
    end = np.concatenate([result.end_weights[name].numpy().ravel()
                          for name, _ in parameter_shapes(trainer.kernel.sizes)])
    description = {
        "specText": spec_text, "shape": {"inputSize": 64, "numClasses": 10},
        "inputs": floats_b64(dataset.train_inputs.numpy()),
        "targets": base64.b64encode(dataset.train_targets.numpy().astype("<u4").tobytes()).decode(),
        "startWeights": floats_b64(flat), "workerIndex": 1, "roundIndex": 2, "steps": STEPS,
    }
    return description, [h.hex() for h in result.checkpoint_hashes], floats_b64(end), spec.training.seed


def run_round_in_node(tmp_path, description: dict, kind: str, cheat: str = "") -> dict:
    path = tmp_path / f"{kind}-{cheat or 'honest'}.json"
    path.write_text(json.dumps({**description, "kind": kind, "cheat": cheat}))
    done = subprocess.run([NODE, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["wasm", "js"])
def test_the_pages_round_gives_the_native_wasm32_workers_checkpoints(native_round, tmp_path, kind):
    description, hashes, end_weights, seed = native_round
    result = run_round_in_node(tmp_path, description, kind)
    assert result["seed"] == str(seed) and seed > 2**53  # read from the spec's text, not rounded by JSON.parse
    assert result["steps"] == [0, 8, 16, 19]
    assert result["hashes"] == hashes
    assert result["endWeights"] == end_weights  # what the update is encoded from


@pytest.mark.parametrize("cheat", ["skipped_steps", "changed_lr"])
def test_a_cheating_tab_publishes_other_checkpoints_than_the_honest_round(native_round, tmp_path, cheat):
    description, hashes, _, _ = native_round
    result = run_round_in_node(tmp_path, description, "wasm", cheat)
    assert result["steps"] == [0, 8, 16, 19]  # it claims every step
    assert result["hashes"][0] == hashes[0]  # from the true W_r
    assert all(mine != honest for mine, honest in zip(result["hashes"][1:], hashes[1:]))


def test_a_spec_that_does_not_allow_wasm32_is_refused_with_words_a_person_reads(native_round, tmp_path):
    description, _, _, _ = native_round
    document = json.loads(description["specText"])
    del document["determinism"]["kernels"]
    path = tmp_path / "torch-only.json"
    path.write_text(json.dumps({**description, "specText": json.dumps(document), "kind": "js", "cheat": ""}))
    done = subprocess.run([NODE, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode != 0
    assert "does not allow the wasm32 kernel a browser trains with: its spec allows torch" in done.stderr
