"""A requester's own data packed into the project's dataset format, in a directory that can be served.

`pack_samples` checks the samples against the bounds a spec may declare (`trolly.chain.market.datasets`),
`check_bounds` the shards and bytes packed against those the chain lets a spec declare (`DatasetBounds`), it
refuses a label with a single example (it could not be both trained on and held out), draws the held-out
split from an explicit seed (per label, so every label is in both splits), and builds the same manifest and
content-addressed shards as the bundled datasets (`manifest.py`), with the label names and the source's
description added to the manifest: classification samples of features (`readers.py`), or texts as token ids
of a base model's tokenizer with the manifest's `context` set, for `lora-text` (`tokenized.py`). A CSV packed
with `task="regression"` predicts its label column as a number (`regression.py`): the split is drawn over all
rows, and the shards hold the target standardized by the preprocessing's `target`.

A packed directory holds a blob store (`blobs/`, what `trolly-wallet data serve` serves), `dataset.json`,
the summary a `task submit --data` reads, for a CSV `preprocessing.json` (the fitted preprocessing in clear,
what a prediction applies to raw rows), and for private data (the default) `data.key`, the data key its
shards are encrypted under (mode 0600, never served: the store serves `blobs/` by hash only). It is written under a temporary name and renamed into place, so a
failed pack leaves nothing behind.

`data.key` never leaves the requester's machine. Every task trains on its own copy (`for_one_task`): the shards
re-encrypted under a data key drawn for that task, which the chain takes a commitment to and refuses to see
twice, added to the same store, the key kept as `task-keys/<manifest hash>.key` (0600). So one task's key, which
its members and drawn validators receive, opens no other task's shards.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import shutil
import tempfile

import numpy as np

from trolly.chain.market.base_models import BASE_MODELS
from trolly.chain.market.datasets import (CLASSIFICATION, MAX_PACKED_CLASSES, MAX_PACKED_INPUT_SIZE,
                                          MAX_PACKED_SAMPLES, PACKED, REGRESSION, TASKS)
from trolly.chain.market.params import MarketParams
from trolly.wallet.files import install_directory, write_atomically, write_private_file

from ..blobs.store import BlobStore
from ..errors import ComputeError, DatasetError
from ..spec import LORA_TEXT_BASE
from .dataset import Dataset
from .encryption import CIPHER, check_data_key, decrypt_shard, new_data_key
from .manifest import (MANIFEST_VERSION, SHARD_SAMPLES, DatasetBlobs, _blob, _finish, _shard_split, is_private,
                       load_dataset, manifest_size, rekey_blobs)
from .preprocessing import Preprocessing, Target, fit
from .readers import LabelledSamples, features_array, read_samples
from .regression import (MAX_NUMERIC_CLASSES, REGRESSION_ADVICE, check_rows, regression_hint,
                         standardized_targets)
from .tokenized import DEFAULT_CONTEXT, read_jsonl_tokens

SUMMARY_FILE = "dataset.json"
PREPROCESSING_FILE = "preprocessing.json"
"""A packed table's fitted preprocessing in clear (`preprocessing.py`), for the requester's own use: the served
copy is the blob the manifest names, encrypted for private data."""
KEY_FILE = "data.key"
"""A private pack's own data key (32 raw bytes, 0600); only the requester holds it."""
TASK_KEYS = "task-keys"
"""The folder of a private pack's per-task data keys, `<manifest hash>.key` each (0600): the key one task's copy
of the shards is encrypted under, which the requester seals to that task's members and drawn validators."""
DEFAULT_TEST_FRACTION = 0.2
LORA_TEXT = "lora-text"
"""The model texts are packed for as token ids (`--model lora-text`); any other reads features."""


@dataclasses.dataclass(frozen=True)
class DatasetBounds:
    """The shards and shard bytes a spec may declare for its dataset: the chain's `max_dataset_shards` and
    `max_dataset_bytes` market params, which `SubmitTask` checks the spec's `dataset.max_shards` and
    `max_bytes` against."""

    shards: int
    bytes: int

    @classmethod
    def of_chain(cls, params: MarketParams) -> DatasetBounds:
        return cls(params.max_dataset_shards, params.max_dataset_bytes)


PACK_BOUNDS = DatasetBounds.of_chain(MarketParams())
"""What `trolly-wallet data pack` checks, offline: the chain's default market params. `task submit --data`
declares the packed data's shards and bytes in the spec, and checks them against the params of the chain it
submits to before signing."""


@dataclasses.dataclass(frozen=True)
class PackedDataset:
    """A packed directory: its blob store and summary (manifest hash, sizes, label names)."""

    directory: pathlib.Path
    manifest_hash: str
    input_size: int
    num_classes: int
    labels: tuple[str, ...]
    train_samples: int
    test_samples: int
    source_format: str
    context: int = 0
    """Tokens per sample of texts packed as token ids for `lora-text` (`tokenized.py`), 0 for features."""
    columns: tuple[dict, ...] = ()
    """What the preprocessing did per CSV column (`Preprocessing.report`); empty for other sources."""
    task: str = CLASSIFICATION
    """What the labels are (`chain.market.datasets.TASKS`): classes, or a number to predict (regression)."""
    target: Target | None = None
    """A regression pack's target column and the mean and scale it was standardized with."""

    @property
    def store(self) -> BlobStore:
        return BlobStore(self.directory)

    @property
    def key(self) -> bytes | None:
        """The data key this manifest's shards are encrypted under: a task copy's own key, else the pack's
        `data.key`; None for a public pack."""
        return read_data_key(self.directory, self.manifest_hash)

    def summary(self) -> dict:
        tokens = {"context": self.context} if self.context else {}
        if self.columns:
            tokens["columns"] = list(self.columns)
            tokens["imputed_cells"] = sum(column["imputed"] for column in self.columns)
        if self.target is not None:
            tokens["target"] = {"column": self.target.column, "mean": self.target.mean, "scale": self.target.scale}
        hint = regression_hint(self.labels) if self.task == CLASSIFICATION and self.source_format == "csv" else ""
        if hint:
            tokens["hint"] = hint
        return {"manifest_hash": self.manifest_hash, "task": self.task, "input_size": self.input_size, **tokens,
                "num_classes": self.num_classes, "labels": list(self.labels), "train_samples": self.train_samples,
                "test_samples": self.test_samples, "format": self.source_format, "private": self.key is not None,
                "directory": str(self.directory)}

    def spec_dataset(self, urls: list[str]) -> dict:
        """The spec's `dataset` section for this data served at `urls`; it declares the data's shards and bytes
        as `max_shards` and `max_bytes`, which the chain bounds and a worker checks before it joins, and for a
        private pack its `cipher`, which makes the task wait for its data keys (docs/protocol.md 4.1b)."""
        manifest = json.loads(self.store.get(self.manifest_hash))
        shards, size = manifest_size(manifest)
        section = {"name": PACKED, "manifest_hash": self.manifest_hash, "urls": urls, "input_size": self.input_size,
                   "num_classes": self.num_classes, "max_shards": shards, "max_bytes": size}
        if self.context:  # token ids, which only lora-text reads
            section["context"] = self.context
        if self.task == REGRESSION:  # absent means classification
            section["task"] = REGRESSION
        if "cipher" in manifest:
            section["cipher"] = manifest["cipher"]
        return section

    def load(self) -> Dataset:
        """The dataset from the directory's store, every blob hash-checked (and decrypted with `data.key`)."""
        return load_dataset(self.manifest_hash, self.store.get, self.key)


def read_data_key(directory: pathlib.Path, manifest_hash: str = "") -> bytes | None:
    """The data key kept in a packed `directory` for `manifest_hash` (a task copy's key in `task-keys/`, else the
    pack's `data.key`), None when it has none (public data)."""
    task_key = pathlib.Path(directory) / TASK_KEYS / f"{manifest_hash}.key"
    path = task_key if manifest_hash and task_key.exists() else pathlib.Path(directory) / KEY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise DatasetError(f"cannot read the data key {path}: {error.strerror or error}") from None
    try:
        return check_data_key(data)
    except DatasetError:
        raise DatasetError(f"{path} is not a data key (32 bytes): pack the data again") from None


def for_one_task(packed: PackedDataset) -> PackedDataset:
    """The pack as one task trains on it: a public pack as it is; a private one's shards re-encrypted under a
    data key drawn now, for this task alone (the chain refuses a key an earlier task committed to), added to the
    pack's store, the key kept in `task-keys/` (written first, so no served manifest lacks its key). Every front
    end that submits a task on a pack (`task submit --data`, the console, the localnet demo) calls this."""
    base_key = packed.key
    if base_key is None:
        return packed
    key = new_data_key()
    blobs = rekey_blobs(packed.manifest_hash, packed.store.get, base_key, key)
    write_private_file(packed.directory / TASK_KEYS / f"{blobs.manifest_hash}.key", key)
    store = packed.store
    for digest, data in blobs.all_blobs().items():
        store.put(data, expected=digest)
    return dataclasses.replace(packed, manifest_hash=blobs.manifest_hash)


def task_copy(packed: PackedDataset, manifest_hash: str) -> PackedDataset | None:
    """The copy of `packed` a task trains on (`for_one_task`), found by its manifest hash (the pack itself for its
    own hash); None when this pack made no such copy."""
    if manifest_hash == packed.manifest_hash:
        return packed
    if not (packed.directory / TASK_KEYS / f"{manifest_hash}.key").exists() or not packed.store.has(manifest_hash):
        return None
    return dataclasses.replace(packed, manifest_hash=manifest_hash)


def held_out_split(targets: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """A boolean mask of the held-out samples: per label, round(n x fraction) of its n samples (at least one,
    at most n - 1) drawn by a PCG64 generator seeded with `seed`, so the split is the same on every machine."""
    generator = np.random.Generator(np.random.PCG64(seed))
    test = np.zeros(len(targets), dtype=bool)
    for label in range(int(targets.max()) + 1):
        members = np.flatnonzero(targets == label)
        count = min(max(1, round(len(members) * test_fraction)), len(members) - 1)
        test[generator.permutation(members)[:count]] = True
    return test


def check_bounds(blobs: DatasetBlobs, bounds: DatasetBounds) -> None:
    """Refuse packed data listing more shards or shard bytes than the chain lets a spec declare, saying what
    to cut (the samples' count is bounded before packing, by `check_samples`)."""
    shards, size = manifest_size(json.loads(blobs.manifest))
    if shards > bounds.shards:
        raise DatasetError(f"{shards} shards ({SHARD_SAMPLES} samples each) is more than the {bounds.shards} the "
                           f"chain lets a task declare (market param max_dataset_shards): keep a sample of your data")
    if size > bounds.bytes:
        raise DatasetError(f"{size} bytes of shards is more than the {bounds.bytes} the chain lets a task declare "
                           f"(market param max_dataset_bytes): keep a sample of your data, or use fewer columns "
                           f"or smaller images")


def check_size(samples: LabelledSamples) -> None:
    """Refuse more samples, or more features per sample, than a packed dataset may hold."""
    count, features = samples.inputs.shape
    if count > MAX_PACKED_SAMPLES:
        raise DatasetError(f"{count} samples is more than the {MAX_PACKED_SAMPLES} a packed dataset may hold: "
                           f"keep a sample of your data")
    if features > MAX_PACKED_INPUT_SIZE:
        raise DatasetError(f"{features} features per sample is more than the {MAX_PACKED_INPUT_SIZE} a spec may "
                           f"declare: use fewer columns or smaller images")


def check_samples(samples: LabelledSamples) -> tuple[tuple[str, ...], np.ndarray]:
    """The sorted label names and each sample's label index; refuses data no task could be trained on (labels
    that are many numbers with the hint to pack them as regression)."""
    check_size(samples)
    names, targets, counts = np.unique(np.array(samples.labels, dtype=object), return_inverse=True, return_counts=True)
    hint = regression_hint(names) if samples.source_format == "csv" else ""
    if hint and len(names) > MAX_NUMERIC_CLASSES:
        raise DatasetError(f"the label column holds {len(names)} distinct numbers, more than the "
                           f"{MAX_NUMERIC_CLASSES} classes numbers may be packed as: {REGRESSION_ADVICE} (or "
                           f"write category codes as words)")
    if len(names) < 2:
        column = samples.feature_description.get("label_column")
        where = f"the label column {column!r}" if column else "every sample"
        raise DatasetError(f"{where} holds the one label {names[0]!r}: a classifier needs at least two labels; "
                           f"name the column to predict with --label-column, or add samples of another label")
    if len(names) > MAX_PACKED_CLASSES:
        raise DatasetError(f"{len(names)} labels is more than the {MAX_PACKED_CLASSES} a spec may declare")
    single = [str(name) for name, n in zip(names, counts) if n < 2]
    if single:
        raise DatasetError(f"label(s) {', '.join(map(repr, single[:5]))} have a single example: each label needs at "
                           f"least two (one to train on, one held out); add examples or drop the label"
                           + (f"; {hint}" if hint else ""))
    return tuple(str(name) for name in names), targets.astype(np.int64)


def read_for_model(path: pathlib.Path, model: str = "mlp", label_column: str | None = None,
                   context: int | None = None) -> LabelledSamples:
    """PATH's samples as `model` reads them: features for mlp and cnn (`readers.py`), token ids of the pinned
    base model's tokenizer for lora-text (`tokenized.py`, `context` tokens per text)."""
    if model != LORA_TEXT:
        if context is not None:
            raise DatasetError(f"--context is the tokens per text of --model {LORA_TEXT}")
        return read_samples(path, label_column)
    if label_column is not None:
        raise DatasetError(f"--label-column is for CSV files; {LORA_TEXT} reads JSONL lines with a `label` field")
    base = BASE_MODELS[(LORA_TEXT_BASE["package"], LORA_TEXT_BASE["version"])]
    return read_jsonl_tokens(path, base, DEFAULT_CONTEXT if context is None else context)


def pack_file(path: pathlib.Path, model: str = "mlp", label_column: str | None = None, context: int | None = None,
              test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0, key: bytes | None = None,
              keep_columns: tuple[str, ...] = (),
              task: str = CLASSIFICATION) -> tuple[DatasetBlobs, tuple[str, ...], str]:
    """What `trolly-wallet data pack` does before writing: PATH read for `model` and packed (encrypted under
    `key` unless it is None) for `task`, checked against the chain's bounds; the blobs, label names and source
    format."""
    if task not in TASKS:
        raise DatasetError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    if task == REGRESSION and model == LORA_TEXT:
        raise DatasetError(f"--task regression predicts a number from a table's columns; --model {LORA_TEXT} "
                           f"classifies texts")
    samples = read_for_model(path, model, label_column, context)
    if keep_columns and samples.table is None:
        raise DatasetError("--keep-columns is for CSV files")
    if task == REGRESSION and samples.table is None:
        raise DatasetError(f"--task regression is for a CSV file, whose label column is the number to predict; "
                           f"{path} is {samples.source_format}")
    blobs, labels = pack_samples(samples, test_fraction, seed, key, keep_columns, task)
    check_bounds(blobs, PACK_BOUNDS)
    return blobs, labels, samples.source_format


def pack_samples(samples: LabelledSamples, test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
                 key: bytes | None = None, keep_columns: tuple[str, ...] = (),
                 task: str = CLASSIFICATION) -> tuple[DatasetBlobs, tuple[str, ...]]:
    """The manifest and shards of `samples`, with the held-out split drawn from `seed`; and the label names.
    With a data `key` the shards are encrypted under it and the manifest names the cipher (`encryption.py`).
    A CSV's table becomes features only once the split is drawn, by the preprocessing fitted on its train rows
    (`preprocessing.py`), which the pack keeps as a blob the manifest names (encrypted like the shards).
    For `task` regression (a CSV's), the targets are its label column standardized (`regression.py`) and there
    are no label names."""
    if not 0 < test_fraction < 1:
        raise DatasetError(f"the held-out fraction must be between 0 and 1, got {test_fraction}")
    target = None
    if task == REGRESSION:
        check_size(samples)
        check_rows(len(samples.labels), samples.origin or "the CSV")
        labels, test = (), held_out_split(np.zeros(len(samples.labels), dtype=np.int64), test_fraction, seed)
        target, targets = standardized_targets(samples.labels, ~test, samples.feature_description["label_column"],
                                               samples.origin or "the CSV", samples.lines)
    else:
        labels, targets = check_samples(samples)
        test = held_out_split(targets, test_fraction, seed)
    shards: dict[str, bytes] = {}
    extra = {}
    if samples.table is not None:
        samples, preprocessing = _preprocessed(samples, ~test, keep_columns)
        preprocessing = dataclasses.replace(preprocessing, target=target)
        extra["preprocessing"] = _blob(preprocessing.to_bytes(), shards, key)
    inputs, kind = (("tokens", "text-classification") if samples.context
                    else ("inputs", REGRESSION) if task == REGRESSION else ("inputs", "classification"))
    splits = {split: _shard_split({inputs: samples.inputs[mask], "targets": targets[mask]}, shards, key)
              for split, mask in (("train", ~test), ("test", test))}
    manifest = {"version": MANIFEST_VERSION, "name": PACKED, "kind": kind, "input_size": int(samples.inputs.shape[1]),
                "num_classes": 1 if task == REGRESSION else len(labels), "context": samples.context,
                "splits": splits, "labels": list(labels),
                "source": {"format": samples.source_format, "seed": seed, "test_fraction": test_fraction,
                           **samples.feature_description}, **extra}
    if key is not None:
        manifest["cipher"] = CIPHER
    return _finish(manifest, shards), labels


def _preprocessed(samples: LabelledSamples, train: np.ndarray,
                  keep_columns: tuple[str, ...]) -> tuple[LabelledSamples, Preprocessing]:
    """A CSV's samples with their features made by the preprocessing fitted on the `train` rows alone."""
    where = samples.origin or "the CSV"
    preprocessing = fit(samples.table, train, samples.feature_description["label_column"], keep_columns, where,
                        samples.lines)
    if preprocessing.width > MAX_PACKED_INPUT_SIZE:
        raise DatasetError(f"the columns make {preprocessing.width} features per sample, more than the "
                           f"{MAX_PACKED_INPUT_SIZE} a spec may declare: use fewer columns or fewer distinct words")
    out = features_array(len(samples.labels), preprocessing.width, where)
    inputs = preprocessing.transform(samples.table, where, samples.lines, out)
    return dataclasses.replace(samples, inputs=inputs, table=None), preprocessing


def _task_of(manifest: dict, preprocessing: Preprocessing | None) -> tuple[str, Target | None]:
    """A checked manifest's task, and for regression the target its preprocessing standardized."""
    if manifest["kind"] != REGRESSION:
        return CLASSIFICATION, None
    if preprocessing is None or preprocessing.target is None:
        raise DatasetError("a regression pack's preprocessing names no target: pack the data again")
    return REGRESSION, preprocessing.target


def read_preprocessing(manifest: dict, fetch, key: bytes | None) -> Preprocessing | None:
    """The preprocessing a checked manifest names (None for data packed without one), hash-checked and, for a
    private pack, opened with its data `key`."""
    entry = manifest.get("preprocessing")
    if entry is None:
        return None
    data = fetch(entry["hash"])
    if hashlib.sha256(data).hexdigest() != entry["hash"]:
        raise DatasetError(f"the preprocessing {entry['hash'][:12]} does not match its hash")
    if is_private(manifest):
        if key is None:
            raise DatasetError("the pack's preprocessing is encrypted and its data key is not here")
        data = decrypt_shard(key, data)
    return Preprocessing.from_bytes(data)


def write_packed(blobs: DatasetBlobs, labels: tuple[str, ...], source_format: str,
                 directory: pathlib.Path, key: bytes | None = None) -> PackedDataset:
    """Write the blobs, summary and (for private data) the data `key` under a temporary name beside
    `directory`, then rename it into place; refuses a `directory` that exists and is not empty."""
    directory = pathlib.Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise DatasetError(f"{directory} already exists and is not empty: pack into a new directory")
    manifest = json.loads(blobs.manifest)
    preprocessing = read_preprocessing(manifest, blobs.all_blobs().__getitem__, key)
    packed = PackedDataset(directory, blobs.manifest_hash, manifest["input_size"], manifest["num_classes"], labels,
                           manifest["splits"]["train"]["samples"], manifest["splits"]["test"]["samples"], source_format,
                           manifest["context"], () if preprocessing is None else tuple(preprocessing.report()),
                           *_task_of(manifest, preprocessing))
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = pathlib.Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".partial", dir=directory.parent))
    try:
        store = BlobStore(temporary)
        for digest, data in blobs.all_blobs().items():
            store.put(data, expected=digest)
        if key is not None:
            write_private_file(temporary / KEY_FILE, check_data_key(key))
        if preprocessing is not None:  # beside the key, never served: what a prediction applies to raw rows
            write_atomically(temporary / PREPROCESSING_FILE, preprocessing.to_bytes())
        summary = {name: value for name, value in packed.summary().items() if name not in ("directory", "private")}
        write_atomically(temporary / SUMMARY_FILE, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    install_directory(temporary, directory)
    return packed


def open_packed(directory: pathlib.Path) -> PackedDataset:
    """A packed directory, its summary checked against the manifest it names (which must be in its store)."""
    directory = pathlib.Path(directory)
    try:
        summary = json.loads((directory / SUMMARY_FILE).read_text())
        manifest_hash = summary["manifest_hash"]
    except (OSError, ValueError, KeyError, TypeError):
        raise DatasetError(f"{directory} is not a packed dataset (no readable {SUMMARY_FILE}): "
                           f"make one with `trolly-wallet data pack`") from None
    try:
        manifest = json.loads(BlobStore(directory).get(manifest_hash))
        splits = manifest["splits"]
        preprocessing = read_preprocessing(manifest, BlobStore(directory).get, read_data_key(directory, manifest_hash))
        return PackedDataset(directory, manifest_hash, int(manifest["input_size"]), int(manifest["num_classes"]),
                             tuple(manifest["labels"]), int(splits["train"]["samples"]), int(splits["test"]["samples"]),
                             str(manifest["source"]["format"]), int(manifest["context"]),
                             () if preprocessing is None else tuple(preprocessing.report()),
                             *_task_of(manifest, preprocessing))
    except (ComputeError, ValueError, KeyError, TypeError) as error:
        raise DatasetError(f"{directory}: the manifest {manifest_hash[:12]} is missing or malformed ({error}): "
                           f"pack the data again") from None
