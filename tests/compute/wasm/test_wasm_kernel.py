"""The wasm32 kernel under wasmtime: the committed vector's hash, the batch order and lr schedule it promises,
replays from a checkpoint, refusals, and that it trains the digits MLP as torch does (close, not bitwise)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import wasmtime
from torch.nn import functional

from trolly.compute.checkpoints import TrainingState, checkpoint_hash, decode_checkpoint, encode_checkpoint
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.errors import CheckpointError, WasmKernelError
from trolly.compute.lr_schedule import inner_lr
from trolly.compute.models import build_model
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import evaluate, initial_weights
from trolly.compute.wasm.instance import KernelInstance, engine
from trolly.compute.wasm.segment import WasmTrainer, mlp_sizes, train_segment_wasm

from wasm_helpers import (VECTOR, reference_batch, segment_training, vector_dataset, vector_spec_document,
                          vector_start)


@pytest.fixture(scope="module")
def digits():
    return dataset_from_blobs(build_dataset("digits"))


def digits_spec(manifest_hash, hidden=(32,), schedule=None, **training):
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": list(hidden)}})
    document["training"].update({"inner_steps": 12, "checkpoint_every": 5, "batch_size": 16, **training})
    if schedule is not None:
        document["training"]["inner_optimizer"]["schedule"] = schedule
    return spec_from_dict(document)


def test_the_committed_vector_trains_to_its_hash_under_wasmtime(digits):
    vector = json.loads(VECTOR.read_text())
    spec = spec_from_dict(vector["spec"])
    trainer = WasmTrainer(spec, vector_dataset(vector, digits))
    assert list(trainer.sizes) == vector["sizes"] and segment_training(spec) == vector["training"]
    start = vector_start(vector, trainer)
    assert checkpoint_hash(start).hex() == vector["expected"]["startHash"]
    losses: list[float] = []
    end = train_segment_wasm(trainer, start, worker_index=vector["workerIndex"], round_index=vector["roundIndex"],
                             end_step=vector["endStep"], losses=losses)
    assert checkpoint_hash(end).hex() == vector["expected"]["hash"]
    assert losses == vector["expected"]["losses"]


def test_the_vector_exercises_warm_up_decay_and_weight_decay():
    """The vector's segment (segment 1 of round 1) crosses the end of the warm-up into the cosine decay, with
    weight decay on and a seed past 2**53: a kernel that got any of them wrong misses its hash."""
    document = vector_spec_document("ab" * 32)
    vector = json.loads(VECTOR.read_text())
    training = spec_from_dict(document).training
    assert (vector["start"]["step"], vector["endStep"]) == (training.checkpoint_every, 2 * training.checkpoint_every)
    progress = [vector["roundIndex"] * training.inner_steps + s for s in range(vector["start"]["step"], vector["endStep"])]
    assert min(progress) < training.inner_optimizer.schedule.warmup_steps <= max(progress)
    assert training.inner_optimizer.weight_decay > 0 and training.seed >= 2**53  # a seed a JS number would round


def test_the_batch_order_is_the_documented_pure_function_of_seed_worker_round_step():
    kernel = KernelInstance((4, 3), batch_size=24)
    kernel.set_data(np.zeros((1000, 4), dtype=np.float32), np.zeros(1000, dtype=np.int64))
    for seed, worker, round_index, step in [(0, 0, 0, 0), (7, 1, 2, 3), (2**63 - 1, 2**40, 9, 2**33)]:
        kernel.set_stream(seed, worker, round_index)
        drawn = kernel.batch(step).tolist()
        assert drawn == reference_batch(seed, worker, round_index, step, 24, 1000)
        assert all(0 <= index < 1000 for index in drawn) and len(set(drawn)) > 12
    kernel.set_stream(7, 1, 2)
    first = kernel.batch(3).tolist()
    for seed, worker, round_index, step in [(8, 1, 2, 3), (7, 0, 2, 3), (7, 1, 3, 3), (7, 1, 2, 4)]:
        kernel.set_stream(seed, worker, round_index)
        assert kernel.batch(step).tolist() != first


@pytest.mark.parametrize("schedule", [None, {"name": "constant", "warmup_steps": 7},
                                      {"name": "linear", "warmup_steps": 0, "final_lr": 0.0002},
                                      {"name": "cosine", "warmup_steps": 13, "final_lr": 0.0001},
                                      {"name": "cosine", "warmup_steps": 0, "final_lr": 0.0}])
def test_the_kernels_lr_is_compute_lr_schedule_bit_for_bit(schedule):
    spec = digits_spec("ab" * 32, schedule=schedule, rounds=5, inner_steps=17, batch_size=4)
    kernel = KernelInstance((4, 3), batch_size=4)
    kernel.set_training(spec.training)
    for round_index in range(6):  # one round past the last: the schedule holds its final lr
        for step in range(17):
            assert kernel.inner_lr(round_index, step) == inner_lr(spec.training, round_index, step)


def test_a_segment_replayed_from_its_stored_checkpoint_gives_the_same_bytes(digits):
    spec = digits_spec(digits.manifest_hash, schedule={"name": "cosine", "warmup_steps": 3, "final_lr": 0.0001})
    trainer = WasmTrainer(spec, digits)
    fresh = TrainingState.fresh(initial_weights(spec, digits.shape))
    middle = train_segment_wasm(trainer, fresh, worker_index=3, round_index=1, end_step=5)
    stored = encode_checkpoint(middle)
    end = train_segment_wasm(trainer, None, worker_index=3, round_index=1, end_step=12, final=True)
    replayer = WasmTrainer(spec, digits)
    replayed = train_segment_wasm(replayer, decode_checkpoint(stored), worker_index=3, round_index=1, end_step=12,
                                  final=True)
    assert checkpoint_hash(replayed) == checkpoint_hash(end)
    assert not end.optimizer and end.step == 12
    other_worker = train_segment_wasm(replayer, decode_checkpoint(stored), worker_index=4, round_index=1,
                                      end_step=12, final=True)
    assert checkpoint_hash(other_worker) != checkpoint_hash(end)


def test_the_kernel_learns_the_digits(digits):
    spec = digits_spec(digits.manifest_hash, hidden=(64,), batch_size=32, inner_steps=300, rounds=1)
    trainer = WasmTrainer(spec, digits)
    losses: list[float] = []
    end = train_segment_wasm(trainer, TrainingState.fresh(initial_weights(spec, digits.shape)), worker_index=0,
                             round_index=0, end_step=300, losses=losses)
    assert np.mean(losses[-30:]) < 0.4 * np.mean(losses[:30])
    model = build_model("mlp", spec.model.config, digits.shape, spec.training.seed)
    model.load_state_dict(dict(end.weights))
    _, accuracy = evaluate(model, digits)
    assert accuracy > 0.85


def test_the_kernel_stays_close_to_torch_adamw_on_the_same_batches(digits):
    """Not bitwise (its exp and log are its own, its moments flushed, its sums in its own order), but within
    float32 rounding of torch's AdamW over 30 scheduled steps with weight decay, on the batches the kernel drew."""
    spec = digits_spec(digits.manifest_hash, hidden=(64, 32), batch_size=32, inner_steps=30, rounds=2,
                       schedule={"name": "cosine", "warmup_steps": 5, "final_lr": 0.0001})
    inner = spec.training.inner_optimizer
    start = initial_weights(spec, digits.shape)
    trainer = WasmTrainer(spec, digits)
    end = train_segment_wasm(trainer, TrainingState.fresh(start), worker_index=1, round_index=0, end_step=30)
    model = build_model("mlp", spec.model.config, digits.shape, spec.training.seed)
    model.load_state_dict(start)
    optimizer = torch.optim.AdamW(model.parameters(), lr=inner.lr, betas=(inner.beta1, inner.beta2), eps=inner.eps,
                                  weight_decay=0.01)
    trainer.kernel.set_stream(spec.training.seed, 1, 0)
    for step in range(30):
        indices = torch.from_numpy(trainer.kernel.batch(step).astype(np.int64))
        loss = functional.cross_entropy(model(digits.train_inputs[indices]), digits.train_targets[indices])
        optimizer.zero_grad()
        loss.backward()
        for group in optimizer.param_groups:
            group["lr"] = inner_lr(spec.training, 0, step)
            group["weight_decay"] = inner.weight_decay
        optimizer.step()
    torch_end = model.state_dict()
    difference = sum(float((torch_end[name] - end.weights[name]).pow(2).sum()) for name in start) ** 0.5
    update = sum(float((torch_end[name] - start[name]).pow(2).sum()) for name in start) ** 0.5
    assert update > 0.1
    assert difference < 1e-4 * update


def test_the_kernel_refuses_what_it_cannot_train(digits):
    cnn = spec_from_dict(example_spec(digits.manifest_hash, model={"arch": "cnn", "config": {}}))
    with pytest.raises(WasmKernelError, match="trains an mlp"):
        mlp_sizes(cnn, digits)
    with pytest.raises(WasmKernelError, match="limits"):
        KernelInstance((4, 0, 3), batch_size=2)
    kernel = KernelInstance((4, 3), batch_size=2)
    with pytest.raises(WasmKernelError, match="classes"):
        kernel.set_data(np.zeros((5, 4), dtype=np.float32), np.array([0, 1, 2, 3, 0]))
    with pytest.raises(WasmKernelError, match="does not fit"):
        kernel.set_data(np.zeros((5, 3), dtype=np.float32), np.zeros(5, dtype=np.int64))
    with pytest.raises(WasmKernelError, match="2\\*\\*64"):
        kernel.set_stream(-1, 0, 0)


def test_a_state_that_is_not_the_models_is_refused_before_anything_changes(digits):
    spec = digits_spec(digits.manifest_hash)
    trainer = WasmTrainer(spec, digits)
    fresh = TrainingState.fresh(initial_weights(spec, digits.shape))
    trainer.load(fresh)
    before = checkpoint_hash(trainer.snapshot())
    wider = TrainingState.fresh(initial_weights(digits_spec(digits.manifest_hash, hidden=(33,)), digits.shape))
    with pytest.raises(CheckpointError, match="is \\(33, 64\\)"):
        trainer.load(wider)
    uneven = {name: dict(slots) for name, slots in fresh.optimizer.items()}
    uneven["layers.0.bias"]["step"] = torch.tensor(2.0)
    with pytest.raises(CheckpointError, match="step counts"):
        trainer.load(TrainingState(step=0, weights=fresh.weights, optimizer=uneven))
    with pytest.raises(CheckpointError, match="not the model's"):
        trainer.load(TrainingState(step=0, weights={"layers.0.weight": fresh.weights["layers.0.weight"]}, optimizer={}))
    assert checkpoint_hash(trainer.snapshot()) == before
    with pytest.raises(WasmKernelError, match="before the current step"):
        train_segment_wasm(trainer, None, worker_index=0, round_index=0, end_step=-1)


def test_the_engine_refuses_relaxed_simd():
    """A kernel using relaxed SIMD (whose fused multiply-add differs between machines) cannot even load in the
    verifier's engine, so no .wasm can slip machine-dependent arithmetic into a wasm32 replay."""
    text = """(module (func (export "f") (param v128 v128 v128) (result v128)
                (f32x4.relaxed_madd (local.get 0) (local.get 1) (local.get 2))))"""
    with pytest.raises(wasmtime.WasmtimeError):
        wasmtime.Module(engine(), wasmtime.wat2wasm(text))
