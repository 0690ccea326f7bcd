"""The browser worker's dataset loader (console/web/src/browser_worker/dataset.js) in Node.js against Python:
the arrays it returns for a public digits task and for a private packed one are, byte for byte, those a native
worker's wasm32 trainer hands the kernel (captured at `KernelInstance.set_data`), fetched over HTTP from the
spec's URLs as a tab must; a tampered shard, a wrong data key, a missing key and a wrong manifest hash are each
refused with their own message."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from bw_data_helpers import AVAILABLE, SKIP_REASON, ServedBlobs, run_script
from market_view_helpers import address, member_answer, task_answer
from trolly.compute.blobs import BlobStore
from trolly.compute.data import build_dataset, load_dataset
from trolly.compute.data.fetch import dataset_urls, keep_blobs
from trolly.compute.data.packing import pack_file, write_packed
from trolly.compute.requester.serving import ServingThread
from trolly.compute.spec import example_spec, parse_spec
from trolly.compute.wasm import instance
from trolly.compute.wasm.trainer import trainer_for
from trolly.wallet.market_views import TaskView

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=SKIP_REASON)

DATA_KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def wasm32_spec(dataset: dict) -> dict:
    return example_spec(dataset["manifest_hash"], model={"arch": "mlp", "config": {"hidden": [16]}},
                        dataset=dataset, determinism={"threads": 1, "kernels": ["torch", "wasm32"]})


def kernel_hashes(spec: dict, dataset, monkeypatch) -> dict:
    """sha256 of the bytes a native wasm32 worker writes into the kernel's memory as its training data (the
    trainer built as `compute.worker.service` builds it), and of the test split as the same dtypes."""
    seen = {}
    handed = instance.KernelInstance.set_data

    def recording(self, inputs, targets):
        seen["train_inputs"] = hashlib.sha256(inputs.astype("<f4", copy=False).tobytes()).hexdigest()
        seen["train_targets"] = hashlib.sha256(targets.astype("<u4").tobytes()).hexdigest()
        return handed(self, inputs, targets)

    monkeypatch.setattr(instance.KernelInstance, "set_data", recording)
    trainer_for(parse_spec(json.dumps(spec).encode()), dataset, kernel="wasm32")
    seen["test_inputs"] = hashlib.sha256(dataset.test_inputs.numpy().astype("<f4").tobytes()).hexdigest()
    seen["test_targets"] = hashlib.sha256(dataset.test_targets.numpy().astype("<i4").tobytes()).hexdigest()
    return seen


@pytest.fixture(scope="module")
def digits():
    return build_dataset("digits")


@pytest.fixture(scope="module")
def private_pack(tmp_path_factory):
    """Digits-like features in a CSV, packed private under DATA_KEY by `trolly-wallet data pack`'s code: three
    training shards and a test shard, each encrypted."""
    folder = tmp_path_factory.mktemp("private")
    samples = build_dataset("digits")
    data = load_dataset(samples.manifest_hash, samples.all_blobs().__getitem__)
    rows = np.concatenate([data.train_inputs.numpy(), data.test_inputs.numpy()])[:1500] * 16
    labels = np.concatenate([data.train_targets.numpy(), data.test_targets.numpy()])[:1500]
    lines = [",".join([f"f{i}" for i in range(64)] + ["label"])]
    lines += [",".join([f"{value:g}" for value in row] + [f"digit-{label}"]) for row, label in zip(rows, labels)]
    source = folder / "digits.csv"
    source.write_text("\n".join(lines) + "\n")
    blobs, names, source_format = pack_file(source, key=DATA_KEY)
    return write_packed(blobs, names, source_format, folder / "pack", DATA_KEY)


def served_store(directory, blobs) -> ServingThread:
    """`blobs` in a blob store at `directory`, served read-only by the project's blob service."""
    store = BlobStore(directory)
    keep_blobs(store, blobs)
    return ServingThread(store, "127.0.0.1", 0)


def test_a_public_digits_task_loads_from_the_requester_to_the_kernels_bytes(digits, tmp_path, monkeypatch):
    """The bundled digits as localnet's demo and the console serve them (the real blob service at the spec's
    URL): a tab cannot build them, so it fetches them, and gets the native worker's kernel input bit for bit."""
    with served_store(tmp_path, digits) as server:
        spec = wasm32_spec({"name": "digits", "manifest_hash": digits.manifest_hash, "urls": [server.url + "/"]})
        loaded = run_script("load_dataset.mjs", {"spec": spec})
    dataset = load_dataset(digits.manifest_hash, digits.all_blobs().__getitem__)
    assert loaded["ok"], loaded
    assert {key: loaded[key] for key in ("train_inputs", "train_targets", "test_inputs", "test_targets")} == \
        kernel_hashes(spec, dataset, monkeypatch)
    assert (loaded["train_count"], loaded["test_count"]) == (len(dataset.train_inputs), len(dataset.test_inputs))
    assert (loaded["input_size"], loaded["num_classes"]) == (64, 10)
    assert loaded["types"] == ["Float32Array", "Int32Array", "Float32Array", "Int32Array"]


def test_a_private_pack_decrypts_with_its_data_key_to_the_kernels_bytes(private_pack, monkeypatch):
    manifest = json.loads(private_pack.store.get(private_pack.manifest_hash))
    assert manifest["cipher"] == "xsalsa20poly1305" and len(manifest["splits"]["train"]["shards"]) >= 2
    with ServingThread(private_pack.store, "127.0.0.1", 0) as server:
        spec = wasm32_spec(private_pack.spec_dataset([server.url]))
        loaded = run_script("load_dataset.mjs", {"spec": spec, "dataKey": DATA_KEY.hex()})
    assert loaded["ok"], loaded
    dataset = load_dataset(private_pack.manifest_hash, private_pack.store.get, DATA_KEY)
    assert {key: loaded[key] for key in ("train_inputs", "train_targets", "test_inputs", "test_targets")} == \
        kernel_hashes(spec, dataset, monkeypatch)


def test_a_private_pack_is_refused_without_its_key_and_with_another(private_pack):
    """Attack: a worker holding another task's data key (or none yet) trains on nothing it cannot read: the
    shards do not open, and nothing is returned."""
    with ServingThread(private_pack.store, "127.0.0.1", 0) as server:
        spec = wasm32_spec(private_pack.spec_dataset([server.url]))
        missing = run_script("load_dataset.mjs", {"spec": spec})
        wrong = run_script("load_dataset.mjs", {"spec": spec, "dataKey": OTHER_KEY.hex()})
    assert missing["error"] == "DataKeyError" and "has not been delivered" in missing["message"]
    assert wrong["error"] == "DataKeyError" and "does not open with this data key" in wrong["message"]
    assert wrong["classes"] == ["DataKeyError", "DatasetError"]


def test_a_tampered_shard_is_refused_by_its_hash(digits):
    """Attack: the server (or the network) changes one byte of a training shard: the tab refuses the shard
    rather than train on data the other workers do not have."""
    blobs = dict(digits.all_blobs())
    shard = json.loads(digits.manifest)["splits"]["train"]["shards"][1]["hash"]
    tampered = bytearray(blobs[shard])
    tampered[-1] ^= 1
    blobs[shard] = bytes(tampered)
    with ServedBlobs(blobs) as server:
        spec = wasm32_spec({"name": "digits", "manifest_hash": digits.manifest_hash, "urls": [server.url]})
        loaded = run_script("load_dataset.mjs", {"spec": spec})
    assert loaded["error"] == "DatasetError", loaded
    assert f"shard of the train split: blob {shard}" in loaded["message"]
    assert f"received bytes hash to {hashlib.sha256(tampered).hexdigest()}" in loaded["message"]


def test_a_tampered_first_server_falls_back_to_the_next_url(digits, tmp_path):
    """A hostile first URL costs a tab nothing but a fetch: the next source serves the right bytes."""
    hostile = {digest: data[::-1] for digest, data in digits.all_blobs().items()}
    with ServedBlobs(hostile) as bad, served_store(tmp_path, digits) as good:
        spec = wasm32_spec({"name": "digits", "manifest_hash": digits.manifest_hash, "urls": [bad.url]})
        loaded = run_script("load_dataset.mjs", {"spec": spec, "urls": [good.url]})
    assert loaded["ok"], loaded


def test_a_wrong_manifest_hash_is_refused(digits):
    """Attack: a server answers the spec's manifest hash with another manifest (another dataset's, or the right
    one edited): the bytes do not hash to what the chain holds, and nothing is fetched past them."""
    wrong_hash = hashlib.sha256(b"another manifest").hexdigest()
    with ServedBlobs({**digits.all_blobs(), wrong_hash: digits.manifest}) as server:
        spec = wasm32_spec({"name": "digits", "manifest_hash": wrong_hash, "urls": [server.url]})
        loaded = run_script("load_dataset.mjs", {"spec": spec})
        absent = run_script("load_dataset.mjs", {"spec": {**spec, "dataset": {**spec["dataset"],
                                                                            "manifest_hash": "ab" * 32}}})
    assert loaded["error"] == "DatasetError"
    assert loaded["message"].startswith(f"the dataset's manifest: blob {wrong_hash}")
    assert f"received bytes hash to {digits.manifest_hash}" in loaded["message"]
    assert absent["error"] == "DatasetError" and "HTTP 404" in absent["message"]


def test_a_manifest_beyond_the_declared_shards_is_refused_before_any_shard(digits):
    """A manifest listing more shards than the spec declared is refused before a shard is fetched (Python's
    `check_manifest_bounds`), so a requester cannot make a tab hold more than the chain bounded."""
    shards = {digest for digest in digits.shards}
    with ServedBlobs({digits.manifest_hash: digits.manifest}) as server:  # no shard is served at all
        spec = wasm32_spec({"name": "digits", "manifest_hash": digits.manifest_hash, "urls": [server.url],
                            "max_shards": len(shards) - 1})
        loaded = run_script("load_dataset.mjs", {"spec": spec})
    assert loaded["error"] == "DatasetError"
    assert loaded["message"] == f"the manifest lists {len(shards)} shards, the spec allows {len(shards) - 1}"


def test_the_dataset_urls_are_the_spec_s_then_the_members_as_python_orders_them(digits):
    """Where a tab looks for data the spec's URLs do not serve (say, a bundled dataset whose spec names none, which
    native members built and serve): the members' blob services and relays, serving members first."""
    spec = wasm32_spec({"name": "digits", "manifest_hash": digits.manifest_hash,
                        "urls": ["http://requester.example:8600/", "http://requester.example:8600"]})
    members = [member_answer(index=0, worker=address(20), status="dropped", blob_url="http://a.example"),
               member_answer(index=1, worker=address(21), status="active", blob_url="http://b.example/x",
                             relay="http://relay.example/"),
               member_answer(index=2, worker=address(22), status="finished", blob_url="http://c.example"),
               member_answer(index=3, worker=address(23), status="active", blob_url="")]
    answer = task_answer(members=members)
    expected = dataset_urls(parse_spec(json.dumps(spec).encode()), TaskView.from_answer(answer))
    assert run_script("dataset_urls.mjs", {"spec": spec, "task": answer}) == expected
    assert expected[1] == f"http://relay.example/workers/{address(21)}"
