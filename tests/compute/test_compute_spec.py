"""Parsing the task spec of docs/protocol.md into frozen dataclasses, with clear errors."""

import dataclasses
import json

import pytest
from market_helpers import edited

from trolly.compute.errors import SpecError
from trolly.compute.models import DataShape, build_model, count_parameters, make_config
from trolly.compute.spec import example_spec, parse_spec, spec_from_dict, spec_hash

HASH = "ab" * 32


def test_the_protocol_example_parses_with_its_values():
    data = json.dumps(example_spec(HASH)).encode()
    spec = parse_spec(data)
    assert spec.model.arch == "mlp" and spec.model.config["hidden"] == [1024, 1024]
    assert spec.training.rounds == 4 and spec.training.checkpoint_every == 10
    assert spec.training.outer_optimizer.lr == 0.7 and spec.training.outer_optimizer.momentum == 0.9
    assert spec.codec == "topk-int8" and spec.determinism.threads == 1
    assert spec.dataset.urls == ("http://127.0.0.1:8600",)
    assert spec.training.inner_optimizer.schedule.name == "constant"  # no schedule field: the lr at every step
    assert spec_hash(data) == __import__("hashlib").sha256(data).hexdigest()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.codec = "fp32"
    with pytest.raises(TypeError):
        spec.model.config["hidden"] = [1]


def edit(path, value):
    return edited(example_spec(HASH), path, value)


@pytest.mark.parametrize("path, value, message", [
    (("version",), 2, "version"),
    (("model", "arch"), "resnet", "model.arch"),
    (("dataset", "name"), "imagenet", "dataset.name"),
    (("dataset", "manifest_hash"), "xyz", "manifest_hash"),
    (("dataset", "urls"), ["ftp://x"], "urls"),
    (("training", "rounds"), 0, "training.rounds"),
    (("training", "inner_steps"), 1.5, "training.inner_steps"),
    (("training", "checkpoint_every"), 11, "at most 10"),
    (("training", "seed"), -1, "training.seed"),
    (("training", "batch_size"), True, "training.batch_size"),
    (("training", "inner_optimizer", "lr"), 0, "lr"),
    (("training", "inner_optimizer", "name"), "sgd", "inner_optimizer.name"),
    (("training", "inner_optimizer", "schedule"), {"name": "step"}, "inner_optimizer.schedule.name"),
    (("training", "outer_optimizer", "momentum"), 1.0, "momentum"),
    (("training", "surprise"), 1, "unknown field"),
    (("codec",), "gzip", "codec"),
    (("determinism", "threads"), 0, "threads"),
    (("training", "seed"), KeyError, "missing seed"),
])
def test_bad_fields_are_refused_with_their_name(path, value, message):
    with pytest.raises(SpecError, match=message):
        spec_from_dict(edit(path, value))


def test_invalid_json_is_refused():
    with pytest.raises(SpecError, match="JSON"):
        parse_spec(b"{not json")


def test_model_config_fields_are_checked_per_architecture():
    shape = DataShape("classification", 64, 10)
    with pytest.raises(SpecError, match="unknown mlp config"):
        make_config("mlp", {"depth": 3}, shape)
    with pytest.raises(SpecError, match="positive integers"):
        make_config("mlp", {"hidden": [0]}, shape)
    with pytest.raises(SpecError, match="does not fit"):
        make_config("transformer", {}, shape)


def test_registry_models_have_the_documented_sizes_and_deterministic_weights():
    digits = DataShape("classification", 64, 10)
    mlp = build_model("mlp", {}, digits, seed=1)
    assert count_parameters(mlp) == 64 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10  # 1.1M
    again = build_model("mlp", {}, digits, seed=1)
    other = build_model("mlp", {}, digits, seed=2)
    first = next(iter(mlp.state_dict().values()))
    assert first.equal(next(iter(again.state_dict().values())))
    assert not first.equal(next(iter(other.state_dict().values())))
    import torch
    cnn = build_model("cnn", {"channels": [4, 8]}, digits, seed=0)
    assert cnn(torch.zeros(2, 64)).shape == (2, 10)
    text = DataShape("text", 16, 256, context=16)
    transformer = build_model("transformer", {"layers": 1, "width": 32}, text, seed=0)
    assert transformer(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, 256)
