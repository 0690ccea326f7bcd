"""The browser worker's weights code (console/web/src/browser_worker/) on shared test vectors: Python computes W_0
of tasks allowing wasm32, a worker's updates and residuals over two rounds under every codec, the outer step of
three workers' updates with momentum, a follower's W_2 from a task view, and Merkle roots of 1..9 leaves; Node.js
must give the same bytes and hashes (weights_vectors.mjs)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess

import numpy as np
import pytest
import torch

from wasm_helpers import NODE, ROOT

from trolly.compute.canonical import encode_tensors
from trolly.compute.canonical_copy import allocate_canonical
from trolly.compute.checkpoint_merkle import merkle_root
from trolly.compute.codecs import CODEC_REGISTRY, get_codec
from trolly.compute.codecs.fused import encode_with_feedback
from trolly.compute.models import DataShape
from trolly.compute.outer_step import GlobalState, aggregate_round
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import initial_weights

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

SCRIPT = "tests/console/browser_worker/weights_vectors.mjs"
DIGITS = DataShape(kind="classification", input_size=64, num_classes=10)


def run_node(requests: list[dict], errors: bool = False) -> list[dict]:
    """Node's answers to `requests`; none may be an error unless `errors`."""
    done = subprocess.run([NODE, SCRIPT], input=json.dumps(requests), capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert errors or not [a for a in answers if isinstance(a, dict) and "error" in a], answers
    return answers


def wasm_document(hidden=(24, 16), seed=2026, codec="int8", outer=None) -> dict:
    document = example_spec("ab" * 32, model={"arch": "mlp", "config": {"hidden": list(hidden)}}, codec=codec,
                            determinism={"threads": 1, "kernels": ["torch", "wasm32"]})
    document["training"]["seed"] = seed
    if outer is not None:
        document["training"]["outer_optimizer"] = {"name": "nesterov", **outer}
    return document


def floats(tensors) -> dict:
    return {name: {"shape": list(t.shape), "data": base64.b64encode(t.contiguous().numpy().astype("<f4").tobytes()).decode()}
            for name, t in tensors.items()}


def tensors_hash(tensors) -> str:
    return hashlib.sha256(encode_tensors(dict(tensors))).hexdigest()


def perturbed(weights, seed: int, scale: float) -> dict:
    """`weights` moved as a round of training moves them: most a little, some not at all (a pseudo-gradient of
    zeros), a block by exactly +-0.5 (ties in magnitude at top-k's threshold), a few by tiny amounts."""
    generator = torch.Generator().manual_seed(seed)
    moved = {}
    for name, tensor in weights.items():
        step = scale * torch.randn(tensor.shape, generator=generator)
        flat = step.reshape(-1)
        flat[: flat.numel() // 7] = 0.0
        if flat.numel() > 6000:
            flat[3000:5000] = torch.where(torch.arange(2000) % 3 == 0, 0.5, -0.5)
            flat[5000:5010] = 1e-30
        moved[name] = (tensor - step).to(torch.float32)
    return moved


@pytest.mark.parametrize("hidden, seed, shape", [
    ((24, 16), 2026, DIGITS),
    ((1024, 1024), 1234, DIGITS),  # the MLP template's default size
    ((3,), 2**62 + 12345, DataShape(kind="classification", input_size=5, num_classes=2)),  # a seed past 2^53
    ((), 0, DataShape(kind="classification", input_size=30, num_classes=4)),
])
def test_javascript_computes_the_portable_w0_to_the_bit(hidden, seed, shape):
    document = wasm_document(hidden, seed)
    expected = tensors_hash(initial_weights(spec_from_dict(document), shape))
    spec_text = json.dumps(document)
    [answer] = run_node([{"op": "initial", "specText": spec_text,
                          "shape": {"inputSize": shape.input_size, "numClasses": shape.num_classes}}])
    assert answer["hash"] == expected


def python_rounds(codec: str, rounds) -> list[dict]:
    """What `encode_update` computes for each round: the update of (start - end) + the previous residual, under
    `codec`, and the new residual's canonical bytes."""
    residual, made = None, []
    for start, end in rounds:
        residual_bytes, residual_out = allocate_canonical(end)
        data = encode_with_feedback(get_codec(codec), start, end, residual, residual_out)
        made.append({"updateHash": hashlib.sha256(data).hexdigest(),
                     "residualHash": hashlib.sha256(bytes(residual_bytes)).hexdigest(), "update": data})
        residual = {name: tensor.clone() for name, tensor in residual_out.items()}
    return made


def test_javascript_encodes_a_workers_updates_with_error_feedback_under_every_codec():
    """Two rounds of a 64-1100-10 MLP (a weight of 70,400 values: two top-k chunks, many int8 and sign chunks),
    the second round carrying the first's residual."""
    shape = DataShape(kind="classification", input_size=64, num_classes=10)
    start = initial_weights(spec_from_dict(wasm_document((1100,))), shape)
    end = perturbed(start, 1, 1e-2)
    start_2 = perturbed(start, 2, 3e-2)
    end_2 = perturbed(start_2, 3, 1e-2)
    rounds = [(start, end), (start_2, end_2)]
    requests, expected = [], []
    for codec in sorted(CODEC_REGISTRY):
        requests.append({"op": "update_rounds", "spec": wasm_document((1100,), codec=codec),
                         "rounds": [{"start": floats(s), "end": floats(e)} for s, e in rounds]})
        expected.append(python_rounds(codec, rounds))
    for codec, answer, made in zip(sorted(CODEC_REGISTRY), run_node(requests), expected):
        for round_index, (theirs, ours) in enumerate(zip(answer, made)):
            assert base64.b64decode(theirs["update"]) == ours["update"], (codec, round_index)
            assert theirs["residualHash"] == ours["residualHash"], (codec, round_index)
            assert theirs["updateHash"] == ours["updateHash"]


def three_workers(codec: str):
    """W_1 of a task (weights and a non-zero momentum) and three workers' encoded updates of round 1."""
    document = wasm_document((40,), codec=codec, outer={"lr": 0.7, "momentum": 0.9})
    spec = spec_from_dict(document)
    start = initial_weights(spec, DIGITS)
    generator = torch.Generator().manual_seed(7)
    state = GlobalState(round=1, weights=start,
                        momentum={n: 1e-3 * torch.randn(t.shape, generator=generator) for n, t in start.items()})
    encoded = []
    for worker_index, samples, seed in ((2, 96, 11), (0, 160, 12), (5, 32, 13)):
        update = {name: torch.from_numpy(a) for name, a in
                  ((n, (t - perturbed(start, seed, 1e-2)[n]).numpy()) for n, t in start.items())}
        encoded.append((worker_index, samples, get_codec(codec).encode(update)))
    return document, spec, state, encoded


@pytest.mark.parametrize("codec", ["int8", "topk-int8", "ternary"])
def test_javascript_aggregates_three_workers_with_momentum_bit_for_bit(codec):
    document, spec, state, encoded = three_workers(codec)
    expected = aggregate_round(state, encoded, spec)
    [answer] = run_node([{"op": "aggregate", "spec": document,
                          "previous": {"round": 1, "weights": floats(state.weights), "momentum": floats(state.momentum)},
                          "updates": [{"workerIndex": w, "samplesProcessed": s, "bytes": base64.b64encode(b).decode()}
                                      for w, s, b in encoded]}])
    assert answer == {"round": 2, "weights": tensors_hash(expected.weights), "momentum": tensors_hash(expected.momentum)}


def commitment(worker: str, data: bytes, samples: int, outcome: str) -> dict:
    return {"worker": worker, "update_hash": hashlib.sha256(data).hexdigest(), "samples_processed": samples,
            "outcome": outcome}


def test_a_javascript_follower_derives_w2_from_the_passed_updates_of_a_task_view():
    """Round 0: three members, one update failed (left out); round 1: two passed. The follower fetches by hash,
    derives W_2 as the Python outer step does, and agrees with the chain's recorded start; an update served as
    other bytes than committed is not used."""
    document, spec, _, encoded = three_workers("int8")
    state_0 = GlobalState.initial(initial_weights(spec, DIGITS))
    members = [{"worker": f"trolly1w{i}", "index": i, "blob_url": f"http://10.0.0.{i}:1", "relay": ""} for i in range(3)]
    round_0 = [encoded[1][2], encoded[0][2], encoded[2][2]]  # workers 0, 1, 2
    state_1 = aggregate_round(state_0, [(0, 160, round_0[0]), (2, 32, round_0[2])], spec)
    halved = {name: tensor * 0.5 for name, tensor in get_codec("int8").decode(encoded[2][2]).items()}
    round_1 = [encoded[0][2], get_codec("int8").encode(halved)]
    state_2 = aggregate_round(state_1, [(0, 96, round_1[0]), (1, 64, round_1[1])], spec)
    view = {"members": members, "round_details": [
        {"round": 0, "final_report": False, "start_weights_hash": state_0.weights_hash().hex(), "commitments": [
            commitment("trolly1w0", round_0[0], 160, "passed"), commitment("trolly1w1", round_0[1], 96, "failed"),
            commitment("trolly1w2", round_0[2], 32, "passed")]},
        {"round": 1, "final_report": False, "start_weights_hash": state_1.weights_hash().hex(), "commitments": [
            commitment("trolly1w0", round_1[0], 96, "passed"), commitment("trolly1w1", round_1[1], 64, "passed")]},
        {"round": 2, "final_report": False, "start_weights_hash": state_2.weights_hash().hex(), "commitments": []}]}
    blobs = {hashlib.sha256(b).hexdigest(): base64.b64encode(b).decode() for b in round_0 + round_1}
    forged = dict(blobs, **{hashlib.sha256(round_1[1]).hexdigest(): base64.b64encode(round_0[1]).decode()})
    request = {"op": "follow", "spec": document, "shape": {"inputSize": 64, "numClasses": 10}, "round": 2,
               "view": view, "blobs": blobs}
    answers = run_node([request, dict(request, blobs=forged)], errors=True)
    assert answers[0] == {"round": 2, "weights": tensors_hash(state_2.weights),
                          "momentum": tensors_hash(state_2.momentum), "hash": state_2.weights_hash().hex(),
                          "disagreement": ""}
    assert answers[1]["error"].startswith("StartUnavailable: cannot derive W_2: 1 passed update(s) of round 1")


def test_javascript_merkle_roots_of_one_to_nine_leaves():
    leaves = [hashlib.sha256(bytes([i])).digest() for i in range(9)]
    answers = run_node([{"op": "merkle", "hashes": [leaf.hex() for leaf in leaves[:n]]} for n in range(1, 10)])
    assert [a["root"] for a in answers] == [merkle_root(leaves[:n]).hex() for n in range(1, 10)]


def test_javascript_canonical_bytes_are_pythons():
    tensors = {"b": torch.tensor([1.5, -0.0, 3e-40]), "a.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
               "é": torch.zeros(0)}
    [answer] = run_node([{"op": "canonical", "tensors": floats(tensors)}])
    assert answer["hash"] == tensors_hash(tensors)


@pytest.mark.parametrize("codec", ["int8", "fp16", "topk-int8", "topk-fp16"])
def test_javascript_rounds_ties_to_even_as_numpy(codec):
    """Values exactly halfway between two codes: int8 codes of a chunk whose scale is 1 (largest magnitude 127),
    halves halfway between two fp16 values, and fp16's subnormals; `np.rint` and numpy's float16 conversion
    round them to even."""
    if "int8" in codec:
        halfway = [127.0, 2.5, -3.5, 0.5, -0.5, 1.5, 126.5, -126.5, 0.0]
    else:
        halfway = [1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11), 2.0**-25, 3 * 2.0**-25, -1.5 * 2.0**-24, 65504.0,
                   1e-8, 0.0]
    start = {"w": torch.tensor(halfway * 8, dtype=torch.float32)}
    end = {"w": torch.zeros(len(halfway) * 8)}
    [answer] = run_node([{"op": "update_rounds", "spec": wasm_document(codec=codec),
                          "rounds": [{"start": floats(start), "end": floats(end)}]}])
    assert base64.b64decode(answer[0]["update"]) == python_rounds(codec, [(start, end)])[0]["update"]


def test_javascript_refuses_to_invent_w0_for_a_torch_only_task():
    """A torch-only task's W_0 is torch's initialisation, which a tab cannot compute: refused, not approximated."""
    document = example_spec("ab" * 32, model={"arch": "mlp", "config": {"hidden": [8]}})
    [answer] = run_node([{"op": "initial", "specText": json.dumps(document),
                          "shape": {"inputSize": 64, "numClasses": 10}}], errors=True)
    assert "only a task allowing wasm32 has a portable one" in answer["error"]
