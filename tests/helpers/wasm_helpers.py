"""The wasm32 kernel's test vectors: a segment described in JSON that every party trains (wasmtime here, Node.js
and Chromium with the .wasm and with the JavaScript fallback) and whose checkpoint hash they must all give.

The committed vector (tests/compute/wasm/vectors/digits_segment.json) holds everything the segment needs as
bytes (its data, its start state) and the expected hash, so it depends on nothing that could drift (torch's
initialisation, the dataset's packing). `python tests/helpers/wasm_helpers.py` rewrites it after a deliberate
change to the kernel's arithmetic (with a new KERNEL_VERSION).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
VECTOR = ROOT / "tests" / "compute" / "wasm" / "vectors" / "digits_segment.json"
RUN_VECTOR = ROOT / "tests" / "compute" / "wasm" / "run_vector.mjs"
NODE = shutil.which("node")

MASK = 2**64 - 1
GOLDEN = 0x9E3779B97F4A7C15
BATCH_DOMAIN = 0x74726F6C6C797731


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_batch(seed: int, worker: int, round_index: int, step: int, batch_size: int, count: int) -> list[int]:
    """The kernel's batch order written again in Python integers, from docs/browser-worker.md's description."""
    key = BATCH_DOMAIN
    for value in (seed, worker, round_index, step):
        key = mix64(((key ^ value) + GOLDEN) & MASK)
    return [((mix64((key + (i + 1) * GOLDEN) & MASK) >> 32) * count) >> 32 for i in range(batch_size)]


def vector_spec_document(manifest_hash: str) -> dict:
    """A small digits MLP with every part of the training arithmetic switched on: weight decay, a warm-up and
    a cosine decay that both fall inside the vector's segment."""
    from trolly.compute.spec import example_spec

    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [24, 16]}})
    document["training"].update(rounds=3, inner_steps=20, batch_size=16, checkpoint_every=8, seed=2**62 + 12345)
    document["training"]["inner_optimizer"].update(
        lr=0.01, weight_decay=0.05, beta1=0.85, beta2=0.99, eps=1e-6,
        schedule={"name": "cosine", "warmup_steps": 32, "final_lr": 0.0005})
    return document


def floats_b64(array) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode()


def floats_from_b64(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").copy()


def segment_training(spec) -> dict:
    """The kernel's view of a spec's training section (what kernel.mjs's prepareKernel takes)."""
    training = spec.training
    inner = training.inner_optimizer
    return {"seed": str(training.seed), "rounds": training.rounds, "innerSteps": training.inner_steps,
            "lr": inner.lr, "beta1": inner.beta1, "beta2": inner.beta2, "eps": inner.eps,
            "weightDecay": inner.weight_decay,
            "schedule": {"name": inner.schedule.name, "warmupSteps": inner.schedule.warmup_steps,
                         "finalLr": inner.schedule.final_lr}}


def flat_state(trainer, state) -> dict:
    """A TrainingState as the JS kernel's flat arrays, base64."""
    trainer.load(state)
    weights, exp_avg, exp_avg_sq, adam_step = trainer.kernel.state()
    return {"step": state.step, "adamStep": adam_step, "weights": floats_b64(weights),
            "expAvg": floats_b64(exp_avg), "expAvgSq": floats_b64(exp_avg_sq)}


def small_dataset(dataset, samples: int):
    """The dataset cut to its first `samples` training samples (the vector carries them as bytes)."""
    return dataclasses.replace(dataset, train_inputs=dataset.train_inputs[:samples].clone(),
                               train_targets=dataset.train_targets[:samples].clone())


def vector_dataset(vector: dict, like):
    """The vector's training data as a Dataset shaped like `like` (the digits dataset)."""
    data = vector["data"]
    inputs = floats_from_b64(data["inputs"]).reshape(-1, vector["sizes"][0])
    targets = np.frombuffer(base64.b64decode(data["targets"]), dtype="<u4").astype(np.int64)
    return dataclasses.replace(like, train_inputs=torch.from_numpy(inputs), train_targets=torch.from_numpy(targets))


def vector_start(vector: dict, trainer):
    """The vector's start state as a TrainingState (via the kernel's layout)."""
    start = vector["start"]
    trainer.kernel.load(floats_from_b64(start["weights"]), floats_from_b64(start["expAvg"]),
                        floats_from_b64(start["expAvgSq"]), start["adamStep"])
    trainer.step = start["step"]
    return trainer.snapshot()


def make_vector() -> dict:
    """Build the vector: digits' first 128 samples; segment 1 (steps 8..16) of worker 2's round 1, from the
    checkpoint the kernel reaches from the spec's initial weights (so the start has AdamW state)."""
    from trolly.compute.checkpoints import TrainingState, checkpoint_hash
    from trolly.compute.data import build_dataset, dataset_from_blobs
    from trolly.compute.spec import spec_from_dict
    from trolly.compute.training import initial_weights
    from trolly.compute.wasm.segment import WasmTrainer, train_segment_wasm

    digits = dataset_from_blobs(build_dataset("digits"))
    spec = spec_from_dict(vector_spec_document(digits.manifest_hash))
    dataset = small_dataset(digits, 128)
    trainer = WasmTrainer(spec, dataset)
    fresh = TrainingState.fresh(initial_weights(spec, dataset.shape))
    start = train_segment_wasm(trainer, fresh, worker_index=2, round_index=1, end_step=8)
    vector = {
        "about": "a wasm32 kernel segment: every party must reach expected.hash (tests/helpers/wasm_helpers.py)",
        "spec": vector_spec_document(digits.manifest_hash),
        "sizes": list(trainer.sizes), "batchSize": spec.training.batch_size, "training": segment_training(spec),
        "data": {"inputs": floats_b64(dataset.train_inputs.numpy()),
                 "targets": base64.b64encode(dataset.train_targets.numpy().astype("<u4").tobytes()).decode()},
        "start": flat_state(trainer, start), "workerIndex": 2, "roundIndex": 1, "endStep": 16, "final": False,
    }
    losses: list[float] = []
    end = train_segment_wasm(trainer, start, worker_index=2, round_index=1, end_step=16, losses=losses)
    vector["expected"] = {"startHash": checkpoint_hash(start).hex(), "hash": checkpoint_hash(end).hex(),
                          "losses": losses}
    return vector


def run_node(vector_path: Path, kind: str) -> dict:
    """The vector trained by Node.js with the .wasm (`kind` "wasm") or the JavaScript fallback ("js")."""
    done = subprocess.run([NODE, str(RUN_VECTOR), str(vector_path), kind], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


if __name__ == "__main__":
    VECTOR.write_text(json.dumps(make_vector(), indent=1) + "\n")
    print(f"wrote {VECTOR}")
