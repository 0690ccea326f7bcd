"""`trolly-wallet data pack` on a requester's own data (CSV, JSONL, image folders), and every refusal.

Bad data is refused before anything is paid, with what to fix; a refused pack leaves nothing on disk. A pack
is deterministic: the same data and seed give the same manifest hash, so the held-out split is fixed.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from PIL import Image

from requester_helpers import iris_like, write_csv
from trolly.chain.market import datasets
from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.spec import validate_spec
from trolly.chain.market.params import MarketParams
from trolly.compute.data import load_dataset
from trolly.compute.data.encryption import DataKeyError
from trolly.compute.data.manifest import manifest_size
from trolly.compute.data.packing import PACK_BOUNDS, DatasetBounds, open_packed
from trolly.compute.spec import example_spec, parse_spec
from trolly.wallet.cli import cli


def pack(*args):
    return CliRunner().invoke(cli, ["data", "pack", *map(str, args)], catch_exceptions=False)


def test_pack_csv_keeps_label_names_and_a_seeded_held_out_split(tmp_path):
    source = write_csv(tmp_path / "iris.csv", iris_like())
    result = pack(source, "-o", tmp_path / "packed", "--private", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["labels"] == ["setosa", "virginica"] and summary["input_size"] == 2
    assert summary["train_samples"] + summary["test_samples"] == 40 and summary["test_samples"] == 8
    dataset = open_packed(tmp_path / "packed").load()
    assert dataset.shape.num_classes == 2 and set(dataset.test_targets.tolist()) == {0, 1}
    public = json.loads(pack(source, "-o", tmp_path / "public", "--public", "--json").stdout)
    again = json.loads(pack(source, "-o", tmp_path / "again", "--public", "--json").stdout)
    other_seed = json.loads(pack(source, "-o", tmp_path / "other", "--public", "--seed", "7", "--json").stdout)
    assert again["manifest_hash"] == public["manifest_hash"] != other_seed["manifest_hash"]
    assert summary["private"] and not public["private"] and summary["manifest_hash"] != public["manifest_hash"]


def test_pack_private_keeps_its_key_0600_and_the_spec_names_the_cipher_and_private_is_the_default(tmp_path):
    source = write_csv(tmp_path / "iris.csv", iris_like())
    assert pack(source, "-o", tmp_path / "packed", "--private").exit_code == 0
    packed = open_packed(tmp_path / "packed")
    key_file = tmp_path / "packed" / "data.key"
    assert packed.key is not None and key_file.read_bytes() == packed.key and key_file.stat().st_mode & 0o777 == 0o600
    assert packed.spec_dataset(["http://127.0.0.1:1"])["cipher"] == "xsalsa20poly1305"
    assert packed.load().train_size == packed.train_samples  # the requester's own key opens its data
    assert "cipher" not in open_packed(_public_pack(source, tmp_path)).spec_dataset([])
    assert pack(source, "-o", tmp_path / "default").exit_code == 0
    default = open_packed(tmp_path / "default")
    assert default.key is not None and default.key != packed.key  # a new key for each pack


def _public_pack(source, tmp_path):
    assert pack(source, "-o", tmp_path / "public", "--public").exit_code == 0
    return tmp_path / "public"


def test_pack_csv_with_a_named_label_column(tmp_path):
    source = write_csv(tmp_path / "data.csv", [(r[2], r[0], r[1]) for r in iris_like()], header="kind,a,b")
    summary = json.loads(pack(source, "-o", tmp_path / "packed", "--label-column", "kind", "--json").stdout)
    assert summary["labels"] == ["setosa", "virginica"] and summary["input_size"] == 2


def test_pack_jsonl_texts(tmp_path):
    lines = [{"text": f"the {word} is great and lovely", "label": "pos"} for word in ("film", "book", "meal")]
    lines += [{"text": f"the {word} is awful and boring", "label": "neg"} for word in ("film", "book", "meal")]
    source = tmp_path / "reviews.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = json.loads(pack(source, "-o", tmp_path / "packed", "--json").stdout)
    assert summary["labels"] == ["neg", "pos"] and summary["input_size"] == 512 and summary["format"] == "jsonl"


def write_images(root, sizes):
    for label, size in sizes:
        folder = root / label
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(3):
            Image.new("L", size, color=40 * i).save(folder / f"{i}.png")
    return root


def test_pack_image_folders_flattens_grayscale_images(tmp_path):
    source = write_images(tmp_path / "images", [("cat", (8, 8)), ("dog", (8, 8))])
    summary = json.loads(pack(source, "-o", tmp_path / "packed", "--json").stdout)
    assert summary["labels"] == ["cat", "dog"] and summary["input_size"] == 64 and summary["format"] == "images"


def refused(result, *words):
    assert result.exit_code != 0, result.output
    assert result.stderr.startswith("Error: "), result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.mark.parametrize("content, words", [
    ("", ["is empty"]),
    ("1,2,3\n4,5,6\n", ["no header row"]),
    ("a,b,label\n", ["no rows"]),
    ("a,b,label\n1,2,cat\n2,x,dog\n3,4,cat\n4,5,dog\n", ["line 3", "'b'", "not a number", "fix the cell"]),
    ("a,b,label\n1,2,cat\n2,3\n", ["line 3", "2 cells", "header has 3", "one cell per column"]),
    ("label\ncat\ndog\n", ["add feature columns"]),
    ("a,b,label\n1,2,cat\n1,2,cat\n3,4,dog\n", ["'dog'", "single example"]),
    ("a,b,label\n1,2,cat\n1,2,cat\n", ["label column 'label'", "at least two labels", "--label-column"]),
])
def test_pack_refuses_bad_csv_and_writes_nothing(tmp_path, content, words):
    source = tmp_path / "bad.csv"
    source.write_text(content)
    refused(pack(source, "-o", tmp_path / "packed"), *words)
    assert not (tmp_path / "packed").exists() and [p.name for p in tmp_path.iterdir()] == ["bad.csv"]


def test_pack_refuses_a_missing_label_column(tmp_path):
    source = write_csv(tmp_path / "data.csv", iris_like())
    refused(pack(source, "-o", tmp_path / "packed", "--label-column", "species"), "no label column 'species'", "a, b, label")


def test_pack_refuses_mixed_image_sizes(tmp_path):
    source = write_images(tmp_path / "images", [("cat", (8, 8)), ("dog", (16, 16))])
    refused(pack(source, "-o", tmp_path / "packed"), "mixed image sizes", "8x8", "16x16")


def test_pack_refuses_an_empty_class_folder_and_bad_jsonl(tmp_path):
    source = write_images(tmp_path / "images", [("cat", (8, 8))])
    (source / "dog").mkdir()
    refused(pack(source, "-o", tmp_path / "packed"), "holds no images")
    lines = tmp_path / "texts.jsonl"
    lines.write_text('{"text": "hello", "label": "a"}\n{"text": "bye"}\n')
    refused(pack(lines, "-o", tmp_path / "packed"), "line 2", "no 'label' field")


def test_pack_refuses_more_rows_than_the_dataset_bound(tmp_path, monkeypatch):
    monkeypatch.setattr("trolly.compute.data.packing.MAX_PACKED_SAMPLES", 10)
    refused(pack(write_csv(tmp_path / "data.csv", iris_like()), "-o", tmp_path / "packed"), "more than the 10")


@pytest.mark.parametrize("bounds, words", [
    (DatasetBounds(shards=1, bytes=1 << 30), ["2 shards", "more than the 1 ", "max_dataset_shards", "keep a sample"]),
    (DatasetBounds(shards=1_024, bytes=100), ["bytes of shards is more than the 100 ", "max_dataset_bytes"]),
])
def test_pack_refuses_more_shards_or_bytes_than_the_chain_allows_and_writes_nothing(tmp_path, monkeypatch, bounds,
                                                                                     words):
    monkeypatch.setattr("trolly.compute.data.packing.PACK_BOUNDS", bounds)
    source = write_csv(tmp_path / "data.csv", iris_like())  # 32 + 8 samples: a train shard and a test shard
    refused(pack(source, "-o", tmp_path / "packed"), *words)
    assert [p.name for p in tmp_path.iterdir()] == ["data.csv"]


def test_the_default_pack_bounds_are_the_chains_default_market_params():
    assert PACK_BOUNDS == DatasetBounds(MarketParams().max_dataset_shards, MarketParams().max_dataset_bytes)


def test_submit_data_refuses_data_beyond_the_chains_bounds_before_signing(tmp_path, monkeypatch):
    async def strict_params(client):
        return dataclasses.replace(MarketParams(), max_dataset_shards=1)

    monkeypatch.setattr("trolly.wallet.requester.get_market_params", strict_params)
    source = write_csv(tmp_path / "data.csv", iris_like())
    result = CliRunner().invoke(cli, ["task", "submit", "--data", str(source), "--data-url", "http://127.0.0.1:9",
                                      "--budget", "50trl", "--from", "requester", "--yes"],
                                env={"TROLLY_WALLET_HOME": str(tmp_path / "home")}, catch_exceptions=False)
    refused(result, "declares 2 shards", "this chain allows 1 shards", "pack a sample")
    assert not (tmp_path / "home").exists()  # no key was read, nothing signed


def test_pack_refuses_a_non_empty_output_directory(tmp_path):
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / "mine.txt").write_text("keep me")
    refused(pack(write_csv(tmp_path / "data.csv", iris_like()), "-o", tmp_path / "packed"), "not empty")
    assert (tmp_path / "packed" / "mine.txt").read_text() == "keep me"


def test_a_packed_spec_declares_its_shape_and_the_chain_bounds_it(tmp_path):
    source = write_csv(tmp_path / "data.csv", iris_like())
    summary = json.loads(pack(source, "-o", tmp_path / "packed", "--json").stdout)
    packed = open_packed(tmp_path / "packed")
    document = example_spec(summary["manifest_hash"], dataset=packed.spec_dataset(["http://127.0.0.1:8600"]))
    raw = json.dumps(document).encode()
    assert validate_spec(raw, 4).footprint.parameters == 2 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 2 + 2
    assert parse_spec(raw).dataset.input_size == 2
    for broken in ({"input_size": None}, {"num_classes": 1}, {"input_size": datasets.MAX_PACKED_INPUT_SIZE + 1}):
        dataset = {**document["dataset"], **broken}
        if broken.get("input_size", 0) is None:
            del dataset["input_size"]
        with pytest.raises(InvalidSpec):
            validate_spec(json.dumps({**document, "dataset": dataset}).encode(), 4)
    with pytest.raises(InvalidSpec, match="bundled"):
        validate_spec(json.dumps(example_spec("0" * 64, dataset={"name": "digits", "manifest_hash": "0" * 64,
                                                                  "input_size": 3})).encode(), 4)


def test_submit_data_builds_the_spec_around_the_packed_data(tmp_path):
    from trolly.compute.requester.cli import prepare_data_submission

    source = write_csv(tmp_path / "data.csv", iris_like())
    prepared = prepare_data_submission(str(source), None, "mlp", 2, ("http://127.0.0.1:9999",), "127.0.0.1:0", None)
    spec = parse_spec(prepared.spec)
    assert prepared.server is None and (tmp_path / "data.csv.packed" / "dataset.json").exists()
    assert (spec.dataset.name, spec.dataset.input_size, spec.dataset.num_classes) == ("packed", 2, 2)
    assert spec.dataset.urls == ("http://127.0.0.1:9999",) and spec.training.rounds == 2 and spec.codec == "int8"
    shards, size = manifest_size(json.loads(prepared.packed.store.get(prepared.packed.manifest_hash)))
    assert (spec.dataset.max_shards, spec.dataset.max_bytes) == (shards, size) == (2, size)  # what workers check
    assert spec.model.config["hidden"] == (128,) or list(spec.model.config["hidden"]) == [128]
    assert json.loads(prepared.spec)["dataset"]["cipher"] == "xsalsa20poly1305"  # private by default
    assert prepared.packed.key is not None


def test_every_submission_of_a_pack_trains_on_its_own_copy_under_a_fresh_key(tmp_path):
    """Attack (issue 32 item 2): re-submitting a pack reused its data key, so a key collected from one task
    opened the next one's shards. Each submission re-encrypts the pack under a key drawn for it; the pack itself
    is reused (packed again the same, under the key it keeps, which never leaves the machine)."""
    from trolly.compute.requester.cli import prepare_data_submission

    source = write_csv(tmp_path / "data.csv", iris_like())
    urls = ("http://127.0.0.1:9999",)
    first = prepare_data_submission(str(source), None, "mlp", 2, urls, "127.0.0.1:0", None)
    again = prepare_data_submission(str(source), None, "mlp", 2, urls, "127.0.0.1:0", None)
    pack = open_packed(tmp_path / "data.csv.packed")
    assert pack.manifest_hash not in (first.packed.manifest_hash, again.packed.manifest_hash)
    assert first.packed.manifest_hash != again.packed.manifest_hash and first.packed.key != again.packed.key
    assert first.data_key_hash != again.data_key_hash and len(first.data_key_hash) == 32
    assert json.loads(again.spec)["dataset"]["manifest_hash"] == again.packed.manifest_hash  # the copy is served
    ours, theirs, plain = first.packed.load(), again.packed.load(), pack.load()
    assert ours.train_inputs.equal(plain.train_inputs) and theirs.test_targets.equal(plain.test_targets)
    with pytest.raises(DataKeyError):  # one task's key opens no other task's copy
        load_dataset(again.packed.manifest_hash, again.packed.store.get, first.packed.key)


def test_submit_data_public_packs_in_clear_and_refuses_a_pack_of_the_other_kind(tmp_path):
    from trolly.compute.requester.cli import prepare_data_submission
    from trolly.wallet.errors import WalletError

    source = write_csv(tmp_path / "data.csv", iris_like())
    urls = ("http://127.0.0.1:9999",)
    public = prepare_data_submission(str(source), None, "mlp", 2, urls, "127.0.0.1:0", None, private=False)
    assert "cipher" not in json.loads(public.spec)["dataset"] and public.packed.key is None
    with pytest.raises(WalletError, match="holds a public pack of this data.*--public"):
        prepare_data_submission(str(source), None, "mlp", 2, urls, "127.0.0.1:0", None)
    other = write_csv(tmp_path / "other.csv", iris_like())
    prepare_data_submission(str(other), None, "mlp", 2, urls, "127.0.0.1:0", None)
    with pytest.raises(WalletError, match="holds a private pack of this data.*--private"):
        prepare_data_submission(str(other), None, "mlp", 2, urls, "127.0.0.1:0", None, private=False)
