"""Private data (issue 26 item 2): shards encrypted under a data key, the key sealed to each member.

Whoever fetches the blobs without the key (a stranger, another task's worker) holds ciphertext; a member whose
sealed key opens decodes the same dataset the plain pack gives; a wrong key, a key sealed to someone else or a
changed byte is a `DataKeyError` (a `DatasetError`), never a crash.
"""

import asyncio
import json

import nacl.signing
import numpy as np
import pytest

from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore
from trolly.compute.blobs.client import BlobClient
from trolly.compute.canonical import decode_tensors
from trolly.compute.data import load_dataset
from trolly.compute.data.encryption import (CIPHER, SEALED_KEY_BYTES, DataKeyError, decrypt_shard, encrypt_shard,
                                            new_data_key, open_data_key, seal_data_key)
from trolly.compute.data.manifest import decode_shard, parse_manifest
from trolly.compute.data.packing import pack_samples
from trolly.compute.data.readers import LabelledSamples
from trolly.compute.errors import DatasetError, EncodingError

LOOPBACK = AddressPolicy(allow_private=True)


def samples(count: int = 700, features: int = 6) -> LabelledSamples:
    generator = np.random.Generator(np.random.PCG64(7))
    inputs = generator.standard_normal((count, features)).astype(np.float32)
    labels = tuple("sick" if value > 0 else "well" for value in inputs[:, 0])
    return LabelledSamples(inputs, labels, "csv", {"columns": [f"f{i}" for i in range(features)], "label_column": "y"})


@pytest.fixture(scope="module")
def data_key():
    return new_data_key()


@pytest.fixture(scope="module")
def private(data_key):
    return pack_samples(samples(), key=data_key)[0]


@pytest.fixture(scope="module")
def plain():
    return pack_samples(samples())[0]


def test_a_private_manifest_names_its_cipher_and_its_shards_are_not_tensor_bytes(private):
    manifest = parse_manifest(private.manifest)
    assert manifest["cipher"] == CIPHER
    for data in private.shards.values():
        with pytest.raises(EncodingError):
            decode_tensors(data)


def test_the_same_data_under_the_same_key_packs_to_the_same_hash(private, data_key):
    assert pack_samples(samples(), key=data_key)[0].manifest_hash == private.manifest_hash
    assert pack_samples(samples(), key=new_data_key())[0].manifest_hash != private.manifest_hash


def test_a_member_with_the_key_loads_what_the_plain_pack_gives(private, plain, data_key):
    ours = load_dataset(private.manifest_hash, private.all_blobs().__getitem__, data_key)
    theirs = load_dataset(plain.manifest_hash, plain.all_blobs().__getitem__)
    assert ours.train_inputs.equal(theirs.train_inputs) and ours.test_targets.equal(theirs.test_targets)


def test_without_the_key_a_private_dataset_is_refused_clearly(private):
    with pytest.raises(DataKeyError, match="has not been delivered"):
        load_dataset(private.manifest_hash, private.all_blobs().__getitem__)


def test_another_tasks_key_opens_nothing(private):
    with pytest.raises(DataKeyError, match="does not open"):
        load_dataset(private.manifest_hash, private.all_blobs().__getitem__, new_data_key())


def test_a_changed_ciphertext_byte_is_a_dataset_error_not_a_crash(data_key):
    sealed = bytearray(encrypt_shard(data_key, b"tensor bytes"))
    sealed[-1] ^= 1
    with pytest.raises(DataKeyError):
        decrypt_shard(data_key, bytes(sealed))
    entry = {"hash": "0" * 64, "size": len(sealed), "samples": 1}
    with pytest.raises(DatasetError, match="does not match its hash"):
        decode_shard(bytes(sealed), entry, data_key)  # the hash check comes first, as for any shard


def test_the_sealed_key_opens_for_its_recipient_only(data_key):
    member, stranger = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    sealed = seal_data_key(data_key, bytes(member.verify_key))
    assert len(sealed) == SEALED_KEY_BYTES
    assert open_data_key(sealed, member) == data_key
    with pytest.raises(DataKeyError, match="sealed to another member"):
        open_data_key(sealed, stranger)
    with pytest.raises(DataKeyError, match="bytes"):
        open_data_key(sealed[:-1], member)
    with pytest.raises(DataKeyError, match="not an ed25519 key"):
        seal_data_key(data_key, b"short")


def test_another_tasks_worker_fetching_the_blobs_over_http_gets_ciphertext(tmp_path, private, plain, data_key):
    """The requester serves the private dataset; a worker of another task (any stranger) fetches every blob
    by hash, hash checks pass, and it holds bytes none of which is a plain shard; the member's key decodes."""
    store = BlobStore(tmp_path / "served")
    for digest, data in private.all_blobs().items():
        store.put(data, expected=digest)

    async def fetch_all() -> dict[str, bytes]:
        server = BlobServer(store)
        await server.start()
        try:
            async with BlobClient([server.url], address_policy=LOOPBACK) as client:
                manifest = json.loads(await client.fetch(private.manifest_hash))
                return {entry["hash"]: await client.fetch(entry["hash"])
                        for split in manifest["splits"].values() for entry in split["shards"]}
        finally:
            await server.stop()

    fetched = asyncio.run(fetch_all())
    plain_shards = set(plain.shards.values())
    assert fetched and not plain_shards & set(fetched.values())
    assert all(plain_bytes not in blob for blob in fetched.values() for plain_bytes in [next(iter(plain_shards))[-64:]])
    with pytest.raises(DataKeyError):
        load_dataset(private.manifest_hash, {private.manifest_hash: private.manifest, **fetched}.__getitem__)
    dataset = load_dataset(private.manifest_hash, {private.manifest_hash: private.manifest, **fetched}.__getitem__,
                           data_key)
    assert dataset.train_size == parse_manifest(private.manifest)["splits"]["train"]["samples"]
