"""A CSV as people have them (a column of words, missing cells, a constant column, an id) packed through
`trolly-wallet data pack`: the shards hold features made by the preprocessing fitted on the train split
alone, the summary says per column what was done, the preprocessing travels encrypted for private data, and
every bad table is refused before anything is written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from trolly.compute.data.encryption import decrypt_shard
from trolly.compute.data.packing import for_one_task, held_out_split, open_packed, read_preprocessing
from trolly.compute.data.preprocessing import MAX_CATEGORIES, Preprocessing, fit
from trolly.compute.errors import ComputeError
from trolly.wallet.cli import cli

ROWS = 40
LABELS = ["no", "yes"] * (ROWS // 2)
TEST = held_out_split(np.array([LABELS.index(label) for label in LABELS]), 0.2, 0)
"""The rows `data pack` holds out at its defaults (the split depends on the labels and the seed alone)."""


def pack(*args):
    return CliRunner().invoke(cli, ["data", "pack", *map(str, args)], catch_exceptions=False)


def table_csv(path):
    """Rows with an id, a size (held-out rows far larger: a leak of their statistics shows), a city (Rome only in
    held-out rows; one train cell empty), a constant and an income with a missing train cell."""
    lines = ["customer_id,size,city,constant,income,plan"]
    train_rows = np.flatnonzero(~TEST)
    for row in range(ROWS):
        size = 1000.0 + row if TEST[row] else float(row % 7)
        city = "Rome" if TEST[row] else ["Paris", "Lyon", "Nice"][row % 3]
        city = "" if row == train_rows[0] else city
        income = "NA" if row == train_rows[1] else str(10 * (row % 5))
        lines.append(f"{5000 + row * 13},{size},{city},3,{income},{LABELS[row]}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_table_with_words_missing_cells_a_constant_and_an_id_packs_with_train_statistics_only(tmp_path):
    """The held-out rows' sizes are in the thousands: were they part of the statistics, the train features
    would not have mean 0 and scale 1."""
    result = pack(table_csv(tmp_path / "t.csv"), "-o", tmp_path / "packed", "--public", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    dataset = open_packed(tmp_path / "packed").load()
    train, test = dataset.train_inputs.numpy(), dataset.test_inputs.numpy()
    # features: size, city=Lyon, city=Nice, city=Paris, constant, income (the id left out)
    assert summary["input_size"] == 6 == train.shape[1]
    size = train[:, 0]
    assert abs(size.mean()) < 1e-5 and abs(size.std() - 1) < 1e-5
    assert test[:, 0].min() > 100  # held-out sizes stay far out, scaled by the train statistics
    one_hot = train[:, 1:4]
    assert set(one_hot.sum(axis=1).tolist()) == {1.0} and not test[:, 1:4].any()  # Rome: none of the categories
    assert not train[:, 4].any() and not test[:, 4].any()  # the constant is harmless zeros
    raw_train_sizes = np.array([float(row % 7) for row in range(ROWS) if not TEST[row]])
    assert np.allclose(size, (raw_train_sizes - raw_train_sizes.mean()) / raw_train_sizes.std(), atol=1e-5)
    columns = {entry["column"]: entry for entry in summary["columns"]}
    assert columns["customer_id"]["kind"] == "left out" and "id" in columns["customer_id"]["done"]
    assert columns["size"]["done"].startswith("standardized") and columns["constant"]["done"].startswith("constant")
    assert columns["city"]["done"] == "one-hot over 3 categories seen in training"
    assert columns["city"]["imputed"] == 1 and columns["income"]["imputed"] == 1 and summary["imputed_cells"] == 2
    income = [10.0 * (row % 5) for row in np.flatnonzero(~TEST)[[0, *range(2, int((~TEST).sum()))]]]  # present
    missing = train[1, 5]  # the second train row's income was NA: the median of the present train incomes
    assert np.isclose(missing, (np.median(income) - np.mean(income)) / np.std(income), atol=1e-5)


def test_keep_columns_keeps_an_id_and_refuses_a_column_that_is_not_there(tmp_path):
    source = table_csv(tmp_path / "t.csv")
    kept = json.loads(pack(source, "-o", tmp_path / "kept", "--keep-columns", "customer_id", "--json").stdout)
    assert kept["input_size"] == 7 and kept["columns"][0]["column"] == "customer_id"
    result = pack(source, "-o", tmp_path / "other", "--keep-columns", "nope")
    assert result.exit_code != 0 and "'nope'" in result.stderr and not (tmp_path / "other").exists()


def test_a_private_packs_preprocessing_is_encrypted_and_a_task_copy_reencrypts_it(tmp_path):
    """Column statistics are facts about the data: served in clear, a private pack's means and categories
    would leak to anyone who fetches its blobs."""
    assert pack(table_csv(tmp_path / "t.csv"), "-o", tmp_path / "packed").exit_code == 0
    packed = open_packed(tmp_path / "packed")
    manifest = json.loads(packed.store.get(packed.manifest_hash))
    served = packed.store.get(manifest["preprocessing"]["hash"])
    assert b"Paris" not in served and b"income" not in served and b"Paris" not in packed.store.get(packed.manifest_hash)
    opened = Preprocessing.from_bytes(decrypt_shard(packed.key, served))
    assert opened.columns[1].categories == ("Lyon", "Nice", "Paris")
    copy = for_one_task(packed)
    copied = json.loads(copy.store.get(copy.manifest_hash))
    assert copied["preprocessing"]["hash"] != manifest["preprocessing"]["hash"]
    assert read_preprocessing(copied, copy.store.get, copy.key).columns == \
        read_preprocessing(manifest, packed.store.get, packed.key).columns
    with pytest.raises(ComputeError):
        read_preprocessing(copied, copy.store.get, packed.key)  # the pack's own key does not open the copy's


def test_a_word_unseen_in_training_maps_to_none_of_the_categories():
    preprocessing = fit({"city": ["a", "b", "a", "b"], "n": ["1", "2", "3", "4"]}, np.ones(4, dtype=bool), "y")
    again = Preprocessing.from_bytes(preprocessing.to_bytes())
    assert again == preprocessing
    features = again.transform({"n": ["2.5"], "city": ["zzz"]})
    assert features.dtype == np.float32 and features.tolist() == [[0.0, 0.0, 0.0]]


def bad_tables():
    many = "".join(f"{i % 2},w{i % (MAX_CATEGORIES + 5)},{['a', 'b'][i % 2]}\n" for i in range(400))
    return [
        (b"x,city,label\n" + many.encode(), ["'city'", f"{MAX_CATEGORIES + 5} distinct", "leave the column out"]),
        ("a,label\ncaf\u00e9,x\n1,y\n".encode("latin-1"), ["not UTF-8", "save it as UTF-8"]),
        (b"a,b,label\n1,2,x\n3,4,y\n5,6\n", ["line 4", "one cell per column"]),
        (b"a,b,label\n1,2,x\n3,4,x\n5,6,x\n", ["label column 'label'", "--label-column"]),
        (b"", ["is empty", "header row"]),
    ]


@pytest.mark.parametrize("content, words", bad_tables())
def test_a_bad_table_is_refused_naming_what_to_do_and_nothing_is_written(tmp_path, content, words):
    source = tmp_path / "bad.csv"
    source.write_bytes(content)
    result = pack(source, "-o", tmp_path / "packed")
    assert result.exit_code != 0
    for word in words:
        assert word in result.stderr, result.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["bad.csv"]
