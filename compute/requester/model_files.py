"""What `task fetch` writes beside the weights so the model answers a raw row: the table's preprocessing, and on
request the model as ONNX.

A packed table's manifest names its preprocessing (`compute/data/preprocessing.py`): the statistics and
categories the pack turned raw cells into features with, which a raw row must go through before the model reads
it. It is written as `preprocessing.json` beside `model.safetensors`:

- public data: fetched by the hash its manifest names, from the spec's and the members' URLs (hash-checked);
- private data: the blob is encrypted under the task's data key, which only the requester's packed directory
  keeps, so it is read from there (`task fetch --data DIR`: the task's own re-encrypted copy, `task_copy`, or the
  pack itself; any other directory is refused). Without `--data` a private table's fetch is refused, naming
  it: a model that cannot be fed a raw row is not what the requester paid for, and nothing is half-written.

Data packed without a preprocessing (images, texts) has none to write. `--onnx` adds `model.onnx`
(`onnx_export.py`).
"""

from __future__ import annotations

import json

from ..blobs import AddressPolicy, BlobClient, BlobError
from ..data.fetch import DatasetFetcher
from ..data.manifest import is_private
from ..data.packing import PREPROCESSING_FILE, PackedDataset, read_preprocessing, task_copy
from ..data.preprocessing import Preprocessing
from .results import ResultError, TaskResult, unfetched

ONNX_FILE = "model.onnx"


async def result_files(result: TaskResult, addresses: AddressPolicy, packed: PackedDataset | None = None,
                       onnx: bool = False) -> dict[str, bytes]:
    """The files to write beside the weights, by name: `preprocessing.json` when the task's data has one (read
    from `packed` when given, else fetched), `model.onnx` when `onnx`."""
    files = {}
    if onnx:
        from .onnx_export import mlp_onnx  # onnx, loaded only to export

        files[ONNX_FILE] = mlp_onnx(result.model())
    preprocessing = (preprocessing_of_pack(result, packed) if packed is not None
                     else await fetched_preprocessing(result, addresses))
    if preprocessing is not None:
        files = {PREPROCESSING_FILE: preprocessing.to_bytes(), **files}
    return files


def preprocessing_of_pack(result: TaskResult, packed: PackedDataset) -> Preprocessing | None:
    """The preprocessing of the task's data from the requester's packed directory, which must hold the task's
    manifest (its own re-encrypted copy, or the pack itself)."""
    manifest_hash = result.spec.dataset.manifest_hash
    copy = task_copy(packed, manifest_hash) if result.spec.dataset.packed else None
    if copy is None:
        raise ResultError(f"{packed.directory} does not hold the data task {result.task_id} trained on (manifest "
                          f"{manifest_hash[:16]}): pass the directory you packed and submitted it from")
    manifest = json.loads(copy.store.get(manifest_hash))
    return read_preprocessing(manifest, copy.store.get, copy.key)


async def fetched_preprocessing(result: TaskResult, addresses: AddressPolicy) -> Preprocessing | None:
    """The preprocessing the task's manifest names, fetched by its hash; a private one is refused, naming
    --data (only the requester's pack holds its key)."""
    if not result.spec.dataset.packed:
        return None
    urls = list(result.spec.dataset.urls) + list(result.urls)
    try:
        manifest = await DatasetFetcher.for_task(result.spec, urls, addresses).manifest()
        entry = manifest.get("preprocessing")
        if entry is None:
            return None
        if is_private(manifest):
            raise ResultError(f"task {result.task_id} trained on private data: its preprocessing (what turns a raw "
                              f"row into the model's features) is encrypted under the data key your packed "
                              f"directory keeps; pass that directory with --data")
        async with BlobClient(urls, address_policy=addresses, max_blob_size=entry["size"]) as blobs:
            data = await blobs.fetch(entry["hash"])  # hash-checked by the client
    except BlobError as error:
        raise unfetched(f"the preprocessing of dataset {result.spec.dataset.manifest_hash[:16]}", error) from None
    return read_preprocessing(manifest, {entry["hash"]: data}.__getitem__, None)
