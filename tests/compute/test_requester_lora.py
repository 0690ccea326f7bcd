"""A requester's own JSONL of texts for LoRA: `data pack --model lora-text` keeps each text as token ids of the
pinned base model's tokenizer, `task submit --data` builds a lora-text spec from them (classes and context from
the data, the base named by package, version and hash), the chain, a worker and a verifier read that spec and
data alike, and the result is written and evaluated as `task fetch` and `task eval` do.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.spec import validate_spec
from trolly.compute.data.dataset import sample_batch
from trolly.compute.data.docstrings import PACKAGES
from trolly.compute.data.lazy_dataset import lazy_dataset
from trolly.compute.data.manifest import decode_shard, parse_manifest
from trolly.compute.data.packing import open_packed
from trolly.compute.errors import DatasetError
from trolly.compute.requester.cli import prepare_data_submission
from trolly.compute.requester.results import TaskResult, evaluate_result, spec_shape, write_result
from trolly.compute.spec import LORA_TEXT_BASE, example_spec, parse_spec
from trolly.compute.training import initial_weights
from trolly.compute.worker.data import check_declared_shape
from trolly.wallet.cli import cli
from trolly.wallet.errors import WalletError
from trolly.wallet.requester import round_blocks_for
from requester_helpers import write_texts

URLS = ("http://127.0.0.1:9999",)


def pack(*args):
    return CliRunner().invoke(cli, ["data", "pack", *map(str, args)], catch_exceptions=False)


def refused(result, *words):
    assert result.exit_code != 0 and result.stderr.startswith("Error: "), result.output
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.fixture(scope="module")
def packed_texts(tmp_path_factory):
    """A private pack of the texts for lora-text, and its summary."""
    directory = tmp_path_factory.mktemp("lora")
    result = pack(write_texts(directory / "texts.jsonl"), "-o", directory / "packed", "--model", "lora-text",
                  "--private", "--json")
    assert result.exit_code == 0, result.output
    return directory, json.loads(result.stdout)


def test_pack_for_lora_text_keeps_token_ids_of_the_base_tokenizer_and_the_label_names(packed_texts, tmp_path):
    directory, summary = packed_texts
    assert summary["context"] == summary["input_size"] == 64 and summary["private"]
    assert summary["labels"] == sorted(PACKAGES) and summary["format"] == "jsonl"
    dataset = open_packed(directory / "packed").load()
    assert dataset.shape.kind == "text-classification" and dataset.shape.context == 64
    assert dataset.train_inputs.dtype == torch.long and dataset.train_inputs.shape[1] == 64
    assert bool((dataset.train_inputs[:, 0] == 101).all())  # every text opens with the tokenizer's [CLS]
    assert set(dataset.test_targets.tolist()) == set(range(len(PACKAGES)))  # every label held out too
    public = json.loads(pack(directory / "texts.jsonl", "-o", tmp_path / "a", "--model", "lora-text", "--public",
                             "--json").stdout)
    again = json.loads(pack(directory / "texts.jsonl", "-o", tmp_path / "b", "--model", "lora-text", "--public",
                            "--json").stdout)
    seeded = json.loads(pack(directory / "texts.jsonl", "-o", tmp_path / "c", "--model", "lora-text", "--public",
                             "--seed", "3", "--json").stdout)
    assert public["manifest_hash"] == again["manifest_hash"] != seeded["manifest_hash"]
    short = json.loads(pack(directory / "texts.jsonl", "-o", tmp_path / "d", "--model", "lora-text", "--context",
                            "16", "--json").stdout)
    assert short["context"] == short["input_size"] == 16
    features = json.loads(pack(directory / "texts.jsonl", "-o", tmp_path / "e", "--json").stdout)
    assert "context" not in features and features["input_size"] == 512  # the MLP's hashed word counts


@pytest.mark.parametrize("content, options, words", [
    ("", ("--model", "lora-text"), ("is empty",)),
    ('{"text": "only one", "label": "a"}\n{"text": "two", "label": "b"}\n{"text": "three", "label": "b"}\n',
     ("--model", "lora-text"), ("single example",)),
    ('{"text": "same", "label": "a"}\n{"text": "label", "label": "a"}\n', ("--model", "lora-text"), ("two labels",)),
    ('{"text": 3, "label": "a"}\n', ("--model", "lora-text"), ("`text` must be a string",)),
    ('{"text": "x", "label": "a"}\n', ("--context", "16"), ("--context", "lora-text")),
    ('{"text": "x", "label": "a"}\n', ("--model", "lora-text", "--context", "513"), ("at most 512",)),
    ('{"text": "x", "label": "a"}\n', ("--model", "lora-text", "--label-column", "a"), ("--label-column",)),
])
def test_pack_for_lora_text_refuses_what_cannot_be_trained_and_writes_nothing(tmp_path, content, options, words):
    source = tmp_path / "texts.jsonl"
    source.write_text(content)
    refused(pack(source, "-o", tmp_path / "packed", *options), *words)
    assert not (tmp_path / "packed").exists() and [p.name for p in tmp_path.iterdir()] == ["texts.jsonl"]


def test_pack_for_lora_text_refuses_a_csv(tmp_path):
    source = tmp_path / "data.csv"
    source.write_text("a,label\n1,x\n2,y\n")
    refused(pack(source, "-o", tmp_path / "packed", "--model", "lora-text"), ".jsonl")


def test_submit_data_builds_a_lora_text_spec_the_chain_accepts_from_the_packed_texts(packed_texts):
    directory, summary = packed_texts
    prepared = prepare_data_submission(str(directory / "packed"), None, None, 3, URLS, "127.0.0.1:0", None)
    document = json.loads(prepared.spec)
    assert document["model"]["arch"] == "lora-text" and document["model"]["base"] == LORA_TEXT_BASE
    assert document["dataset"]["context"] == document["dataset"]["input_size"] == 64
    assert document["dataset"]["num_classes"] == 8 and document["dataset"]["cipher"] == "xsalsa20poly1305"
    summary_on_chain = validate_spec(prepared.spec, 3)
    assert summary_on_chain.private_data and summary_on_chain.footprint.parameters == 76_808
    spec = parse_spec(prepared.spec)
    dataset = open_packed(directory / "packed").load()
    assert spec_shape(spec) == dataset.shape and spec.training.rounds == 3
    assert round_blocks_for(prepared.spec) == 240  # a LoRA round needs a longer commit window than an MLP's 30 blocks
    check_declared_shape(spec, dataset)  # what a worker checks before it trains
    explicit = prepare_data_submission(str(directory / "packed"), None, "lora-text", 3, URLS, "127.0.0.1:0", None)
    # The same spec but for its dataset: every submission trains on its own copy, re-encrypted under a fresh key.
    again = json.loads(explicit.spec)
    assert again["dataset"]["manifest_hash"] != document["dataset"]["manifest_hash"]
    assert explicit.data_key != prepared.data_key and explicit.data_key_hash != prepared.data_key_hash
    again["dataset"]["manifest_hash"] = document["dataset"]["manifest_hash"]
    assert again == document


def test_submit_data_refuses_a_model_the_packed_data_is_not_for(packed_texts, tmp_path):
    directory, _ = packed_texts
    with pytest.raises(WalletError, match="token ids, packed for --model lora-text"):
        prepare_data_submission(str(directory / "packed"), None, "mlp", 2, URLS, "127.0.0.1:0", None)
    assert pack(directory / "texts.jsonl", "-o", tmp_path / "features").exit_code == 0
    with pytest.raises(WalletError, match="data pack --model lora-text"):
        prepare_data_submission(str(tmp_path / "features"), None, "lora-text", 2, URLS, "127.0.0.1:0", None)


def test_submit_data_packs_a_jsonl_for_lora_text_when_asked(tmp_path):
    source = write_texts(tmp_path / "texts.jsonl", every=25)
    prepared = prepare_data_submission(str(source), None, "lora-text", 1, URLS, "127.0.0.1:0", None)
    assert parse_spec(prepared.spec).dataset.context == 64
    assert open_packed(tmp_path / "texts.jsonl.packed").context == 64


def test_the_chain_refuses_a_packed_dataset_and_model_that_do_not_fit(packed_texts):
    directory, _ = packed_texts
    prepared = prepare_data_submission(str(directory / "packed"), None, None, 2, URLS, "127.0.0.1:0", None)
    lora = json.loads(prepared.spec)
    features = {key: value for key, value in lora["dataset"].items() if key != "context"}
    for document, words in [
        ({**lora, "dataset": features}, "does not fit dataset 'packed'"),
        ({**lora, "dataset": {**lora["dataset"], "context": 32}}, "equal to its dataset.context"),
        (example_spec("0" * 64, dataset=lora["dataset"], codec="int8"), "does not fit dataset 'packed'"),
        (example_spec("0" * 64, dataset={"name": "pydocs", "manifest_hash": "0" * 64, "context": 64}), "bundled"),
    ]:
        with pytest.raises(InvalidSpec, match=words):
            validate_spec(json.dumps(document).encode(), 2)


def test_a_worker_refuses_token_data_declared_as_features_and_the_reverse(packed_texts):
    directory, _ = packed_texts
    dataset = open_packed(directory / "packed").load()
    features = example_spec("0" * 64, model={"arch": "mlp", "config": {"hidden": [8]}}, codec="int8")
    features["dataset"] = {"name": "packed", "manifest_hash": dataset.manifest_hash, "input_size": 64,
                           "num_classes": 8}
    with pytest.raises(DatasetError, match="declares classification"):
        check_declared_shape(parse_spec(json.dumps(features)), dataset)
    prepared = prepare_data_submission(str(directory / "packed"), None, None, 2, URLS, "127.0.0.1:0", None)
    lora = json.loads(prepared.spec)
    lora["dataset"].update(num_classes=9)
    with pytest.raises(DatasetError, match="declares text-classification"):
        check_declared_shape(parse_spec(json.dumps(lora)), dataset)


def test_a_verifier_streams_packed_token_shards_to_the_same_batches(packed_texts):
    directory, _ = packed_texts
    packed = open_packed(directory / "packed")
    whole = packed.load()
    manifest = parse_manifest(packed.store.get(packed.manifest_hash))
    lazy = lazy_dataset(packed.manifest_hash, manifest,
                        lambda entry: decode_shard(packed.store.get(entry["hash"]), entry, packed.key))
    assert lazy.shape == whole.shape and tuple(lazy.train_targets[:3].shape) == (3,)
    for step in range(3):
        for expected, got in zip(sample_batch(whole, 8, 5, 0, 1, step), sample_batch(lazy, 8, 5, 0, 1, step)):
            assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_a_packed_lora_result_is_written_with_its_label_names_and_evaluated(packed_texts, tmp_path):
    from safetensors.torch import load_file

    directory, summary = packed_texts
    prepared = prepare_data_submission(str(directory / "packed"), None, None, 2, URLS, "127.0.0.1:0", None)
    spec = parse_spec(prepared.spec)
    dataset = prepared.packed.load()  # the task's own re-encrypted copy: its manifest is the spec's
    assert dataset.manifest_hash == spec.dataset.manifest_hash != open_packed(directory / "packed").manifest_hash
    weights = initial_weights(spec, dataset.shape)
    result = TaskResult(1, "00" * 32, prepared.spec, spec, spec_shape(spec), weights, tuple(summary["labels"]), URLS)
    files = write_result(result, tmp_path / "model")
    assert files == ["adapter.safetensors", "model.safetensors", "spec.json", "labels.json"]
    assert set(load_file(tmp_path / "model" / "adapter.safetensors")) == set(weights)
    assert load_file(tmp_path / "model" / "model.safetensors")["head.weight"].shape == (8, 384)
    assert json.loads((tmp_path / "model" / "labels.json").read_text()) == sorted(PACKAGES)
    answer = evaluate_result(result, dataset)
    assert answer["test_samples"] == summary["test_samples"] and 0 <= answer["accuracy"] <= 1 and answer["loss"] > 0
