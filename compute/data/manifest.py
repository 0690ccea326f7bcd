"""Content-addressed shards and the manifest that lists them.

Manifest (canonical JSON: sorted keys, no spaces, UTF-8), its sha256 is the spec's `manifest_hash`:

    {"version": 1, "name": "digits", "kind": "classification", "input_size": 64, "num_classes": 10,
     "context": 0, "splits": {"train": {"samples": 1437, "shards": [{"hash": "<hex>", "size": 123,
     "samples": 512}, ...]}, "test": {...}}}

A shard is canonical tensor bytes (`canonical.py`): classification shards hold `inputs` (float32, n x
input_size) and `targets` (int64, n); regression shards (a packed table's number column to predict,
`num_classes` 1) hold `inputs` the same and `targets` (float32, n: the target standardized with the train
split's mean and scale, which the preprocessing keeps to report in the original units); text shards hold `tokens` (uint8, n x (context + 1)); text-classification
shards hold `tokens` (int32 token ids, n x context, 0 is padding) and `targets` (int64, n).

A packed table's manifest also names its preprocessing (`"preprocessing": {"hash", "size"}`), the blob of the
column statistics its features were made with (`preprocessing.py`); workers need only the shards.

A private dataset's manifest names its cipher (`"cipher": "xsalsa20poly1305"`) and each of its shards is those
bytes encrypted under the dataset's data key (`encryption.py`); a shard's hash and size are its encrypted
bytes', so fetching and hash checks are the same, and only a holder of the key decodes it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable

import numpy as np
import torch

from ..canonical import decode_tensors, encode_tensors
from ..errors import DatasetError, EncodingError
from ..models.shape import DataShape
from . import bundled_samples, docstrings
from .dataset import Dataset
from .encryption import CIPHER, DataKeyError, decrypt_shard, encrypt_shard

MANIFEST_VERSION = 1
SHARD_SAMPLES = 512
SPLITS = ("train", "test")
KINDS = ("classification", "regression", "text", "text-classification")
FEATURE_KINDS = ("classification", "regression")
"""The kinds whose samples are float32 features (`inputs`, n x input_size)."""


@dataclasses.dataclass(frozen=True)
class DatasetBlobs:
    """A dataset ready to serve: manifest bytes, its hash and every shard by hash."""

    manifest: bytes
    manifest_hash: str
    shards: dict[str, bytes]

    def all_blobs(self) -> dict[str, bytes]:
        return {self.manifest_hash: self.manifest, **self.shards}


def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _shard_split(split_tensors: dict[str, np.ndarray], shards: dict[str, bytes], key: bytes | None = None) -> dict:
    """One split's shards into `shards` by hash (encrypted under `key` when given), and its manifest entry."""
    count = len(next(iter(split_tensors.values())))
    listing = []
    for start in range(0, count, SHARD_SAMPLES):
        piece = {name: torch.from_numpy(np.ascontiguousarray(array[start:start + SHARD_SAMPLES])) for name, array in split_tensors.items()}
        data = encode_tensors(piece)
        if key is not None:
            data = encrypt_shard(key, data)
        digest = hashlib.sha256(data).hexdigest()
        shards[digest] = data
        listing.append({"hash": digest, "size": len(data), "samples": len(next(iter(piece.values())))})
    return {"samples": count, "shards": listing}


def _blob(data: bytes, blobs: dict[str, bytes], key: bytes | None = None) -> dict:
    """One more blob of the dataset (a packed table's preprocessing) into `blobs` by hash, encrypted under
    `key` when given as the shards are; its manifest entry."""
    if key is not None:
        data = encrypt_shard(key, data)
    digest = hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"hash": digest, "size": len(data)}


def build_dataset(name: str, **options) -> DatasetBlobs:
    """Build the manifest and shards of a bundled dataset ("digits" or "pycorpus"); nothing is downloaded."""
    if name not in DATASET_BUILDERS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASET_BUILDERS))}")
    return DATASET_BUILDERS[name](**options)


def _build_digits() -> DatasetBlobs:
    shards: dict[str, bytes] = {}
    splits = {split: _shard_split({"inputs": inputs, "targets": targets}, shards)
              for split, (inputs, targets) in bundled_samples.digits_samples().items()}
    manifest = {"version": MANIFEST_VERSION, "name": "digits", "kind": "classification", "input_size": 64,
                "num_classes": 10, "context": 0, "splits": splits}
    return _finish(manifest, shards)


def _build_pycorpus(max_bytes: int = bundled_samples.CORPUS_MAX_BYTES,
                    context: int = bundled_samples.CORPUS_CONTEXT) -> DatasetBlobs:
    shards: dict[str, bytes] = {}
    splits = {split: _shard_split({"tokens": windows}, shards)
              for split, windows in bundled_samples.corpus_samples(max_bytes, context).items()}
    manifest = {"version": MANIFEST_VERSION, "name": "pycorpus", "kind": "text", "input_size": context,
                "num_classes": 256, "context": context, "splits": splits}
    return _finish(manifest, shards)


def _build_pydocs(context: int = docstrings.CONTEXT) -> DatasetBlobs:
    shards: dict[str, bytes] = {}
    splits = {split: _shard_split({"tokens": tokens, "targets": labels}, shards)
              for split, (tokens, labels) in docstrings.docstring_samples(context).items()}
    manifest = {"version": MANIFEST_VERSION, "name": "pydocs", "kind": "text-classification", "input_size": context,
                "num_classes": len(docstrings.PACKAGES), "context": context, "splits": splits}
    return _finish(manifest, shards)


DATASET_BUILDERS: dict[str, Callable[..., DatasetBlobs]] = {"digits": _build_digits, "pycorpus": _build_pycorpus,
                                                            "pydocs": _build_pydocs}


def _finish(manifest: dict, shards: dict[str, bytes]) -> DatasetBlobs:
    data = canonical_json(manifest)
    return DatasetBlobs(manifest=data, manifest_hash=hashlib.sha256(data).hexdigest(), shards=shards)


def _fetch_checked(fetch: Callable[[str], bytes], digest: str, what: str) -> bytes:
    data = fetch(digest)
    if hashlib.sha256(data).hexdigest() != digest:
        raise DatasetError(f"{what} {digest} does not match its hash")
    return data


def parse_manifest(data: bytes) -> dict:
    """The manifest's JSON, its structure checked (splits, shard entries, sizes); raises DatasetError."""
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise DatasetError(f"manifest is not JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        raise DatasetError("manifest has no supported version")
    if manifest.get("kind") not in KINDS:
        raise DatasetError(f"unknown dataset kind {manifest.get('kind')!r}")
    splits = manifest.get("splits")
    if not isinstance(splits, dict) or set(splits) != set(SPLITS):
        raise DatasetError("manifest must have exactly the splits train and test")
    for split in SPLITS:
        shards = splits[split].get("shards")
        if not isinstance(shards, list) or not shards:
            raise DatasetError(f"manifest split {split} lists no shards")
        for entry in shards:
            if not (isinstance(entry, dict) and isinstance(entry.get("hash"), str) and len(entry["hash"]) == 64
                    and all(isinstance(entry.get(key), int) and entry[key] > 0 for key in ("size", "samples"))):
                raise DatasetError(f"malformed shard entry in split {split}: {entry!r}")
        if not isinstance(splits[split].get("samples"), int):
            raise DatasetError(f"manifest split {split} has no sample count")
    for key in ("input_size", "num_classes", "context"):
        if not isinstance(manifest.get(key), int) or manifest[key] < 0:
            raise DatasetError(f"manifest field {key} must be a non-negative integer")
    entry = manifest.get("preprocessing", {"hash": "0" * 64, "size": 1})
    if not (isinstance(entry, dict) and isinstance(entry.get("hash"), str) and len(entry["hash"]) == 64
            and isinstance(entry.get("size"), int) and entry["size"] > 0):
        raise DatasetError(f"malformed preprocessing entry: {entry!r}")
    if manifest.get("cipher", CIPHER) != CIPHER:
        raise DatasetError(f"manifest cipher {manifest['cipher']!r} is not {CIPHER}")
    return manifest


def is_private(manifest: dict) -> bool:
    """Whether a checked manifest's shards are encrypted under a data key."""
    return "cipher" in manifest


def shard_key(manifest: dict, key: bytes | None) -> bytes | None:
    """The key a checked manifest's shards open with: None for a plain dataset; `key` for a private one,
    DataKeyError when it has not been delivered yet (the caller waits for it; nobody is at fault)."""
    if not is_private(manifest):
        return None
    if key is None:
        raise DataKeyError("the dataset is private and its data key has not been delivered to this member yet")
    return key


def manifest_size(manifest: dict) -> tuple[int, int]:
    """(shards, shard bytes) a checked manifest lists, train and test together."""
    entries = [entry for split in SPLITS for entry in manifest["splits"][split]["shards"]]
    return len(entries), sum(entry["size"] for entry in entries)


def check_manifest_bounds(manifest: dict, max_shards: int, max_bytes: int) -> None:
    """Refuse a manifest listing more shards or bytes than its spec declared (`dataset.max_shards`,
    `dataset.max_bytes`, which the chain bounds): nothing beyond them is fetched or held."""
    shards, size = manifest_size(manifest)
    if shards > max_shards:
        raise DatasetError(f"the manifest lists {shards} shards, the spec allows {max_shards}")
    if size > max_bytes:
        raise DatasetError(f"the manifest lists {size} bytes of shards, the spec allows {max_bytes}")


def loaded_bytes(manifest: dict) -> int:
    """The memory a checked manifest's dataset takes once loaded (`load_dataset`): float32 features and int64
    labels per classification sample (a float32 target per regression sample); int64 inputs and targets of `context` tokens per text sample."""
    per_sample = {"classification": 4 * manifest["input_size"] + 8, "regression": 4 * manifest["input_size"] + 4,
                  "text-classification": 8 * manifest["context"] + 8}.get(manifest["kind"], 2 * 8 * manifest["context"])
    return sum(manifest["splits"][split]["samples"] for split in SPLITS) * per_sample


def decode_shard(data: bytes, entry: dict, key: bytes | None = None) -> dict[str, torch.Tensor]:
    """A fetched shard's tensors, checked against its manifest entry (hash, size, sample count); with `key`,
    its bytes are decrypted after the hash check (DataKeyError when they do not open with it)."""
    if hashlib.sha256(data).hexdigest() != entry["hash"]:
        raise DatasetError(f"shard {entry['hash']} does not match its hash")
    if len(data) != entry["size"]:
        raise DatasetError(f"shard {entry['hash']} has {len(data)} bytes, manifest says {entry['size']}")
    if key is not None:
        data = decrypt_shard(key, data)
    try:
        piece = decode_tensors(data)
    except EncodingError as error:
        raise DatasetError(f"shard {entry['hash']} does not decode: {error}") from None
    count = len(next(iter(piece.values())))
    if count != entry["samples"]:
        raise DatasetError(f"shard {entry['hash']} has {count} samples, manifest says {entry['samples']}")
    return piece


def split_tensors(kind: str, pieces: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of consecutive shards' tensors, as a model reads them."""
    if kind == "classification":
        return torch.cat([p["inputs"] for p in pieces]).float(), torch.cat([p["targets"] for p in pieces]).long()
    if kind == "regression":
        return torch.cat([p["inputs"] for p in pieces]).float(), torch.cat([p["targets"] for p in pieces]).float()
    if kind == "text-classification":
        return torch.cat([p["tokens"] for p in pieces]).long(), torch.cat([p["targets"] for p in pieces]).long()
    tokens = torch.cat([p["tokens"] for p in pieces]).long()
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def load_dataset(manifest_hash: str, fetch: Callable[[str], bytes], key: bytes | None = None) -> Dataset:
    """Fetch a dataset by manifest hash through `fetch(hex) -> bytes`, checking every blob's hash,
    sample count and size against the manifest; a private one's shards are decrypted with its data `key`
    (DataKeyError without it, or with another)."""
    manifest = parse_manifest(_fetch_checked(fetch, manifest_hash, "manifest"))
    kind = manifest["kind"]
    key = shard_key(manifest, key)
    tensors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for split in SPLITS:
        pieces = [decode_shard(fetch(entry["hash"]), entry, key) for entry in manifest["splits"][split]["shards"]]
        inputs, targets = split_tensors(kind, pieces)
        if len(inputs) != manifest["splits"][split]["samples"]:
            raise DatasetError(f"split {split} has {len(inputs)} samples, manifest says {manifest['splits'][split]['samples']}")
        tensors[split] = (inputs, targets)
    return Dataset(name=str(manifest["name"]), manifest_hash=manifest_hash, shape=manifest_shape(manifest),
                   train_inputs=tensors["train"][0], train_targets=tensors["train"][1],
                   test_inputs=tensors["test"][0], test_targets=tensors["test"][1])


def rekey_blobs(manifest_hash: str, fetch: Callable[[str], bytes], old_key: bytes, new_key: bytes) -> DatasetBlobs:
    """A private dataset's blobs re-encrypted from `old_key` to `new_key`: each shard fetched (hash-checked),
    opened with `old_key` and sealed again with `new_key`, under a manifest naming the new shards. The samples,
    their order and every other manifest field stay the same."""
    manifest = parse_manifest(_fetch_checked(fetch, manifest_hash, "manifest"))
    if not is_private(manifest):
        raise DatasetError(f"dataset {manifest_hash[:12]} is not encrypted: it has no data key to replace")
    shards: dict[str, bytes] = {}
    for split in SPLITS:
        listing = []
        for entry in manifest["splits"][split]["shards"]:
            data = encrypt_shard(new_key, decrypt_shard(old_key, _fetch_checked(fetch, entry["hash"], "shard")))
            digest = hashlib.sha256(data).hexdigest()
            shards[digest] = data
            listing.append({**entry, "hash": digest, "size": len(data)})
        manifest["splits"][split]["shards"] = listing
    if "preprocessing" in manifest:
        plain = decrypt_shard(old_key, _fetch_checked(fetch, manifest["preprocessing"]["hash"], "preprocessing"))
        manifest["preprocessing"] = _blob(plain, shards, new_key)
    return _finish(manifest, shards)


def manifest_shape(manifest: dict) -> DataShape:
    """The shape a checked manifest gives a model."""
    return DataShape(kind=manifest["kind"], input_size=int(manifest["input_size"]),
                     num_classes=int(manifest["num_classes"]), context=int(manifest["context"]))


def dataset_from_blobs(blobs: DatasetBlobs) -> Dataset:
    """Load a dataset built in this process (the same checks as over the network)."""
    store = blobs.all_blobs()

    def fetch(digest: str) -> bytes:
        if digest not in store:
            raise DatasetError(f"blob {digest} is not part of this dataset")
        return store[digest]

    return load_dataset(blobs.manifest_hash, fetch)
