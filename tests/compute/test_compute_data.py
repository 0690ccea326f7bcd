"""Bundled datasets as content-addressed shards; canonical tensor bytes; the checkpoint Merkle tree."""

import hashlib
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trolly.compute.canonical import decode_tensors, encode_tensors, hash_tensors
from trolly.compute.data import build_dataset, dataset_from_blobs, load_dataset
from trolly.compute.errors import DatasetError, EncodingError, MerkleError
from trolly.compute.checkpoint_merkle import leaf_hash, merkle_proof, merkle_root, node_hash, verify_proof


@pytest.fixture(scope="module")
def digits_blobs():
    return build_dataset("digits")


def test_digits_builds_the_same_manifest_every_time(digits_blobs):
    assert build_dataset("digits").manifest_hash == digits_blobs.manifest_hash
    manifest = json.loads(digits_blobs.manifest)
    assert manifest["splits"]["train"]["samples"] + manifest["splits"]["test"]["samples"] == 1797
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            data = digits_blobs.shards[shard["hash"]]
            assert hashlib.sha256(data).hexdigest() == shard["hash"] and len(data) == shard["size"]


def test_loaded_digits_have_the_declared_shapes(digits_blobs):
    dataset = dataset_from_blobs(digits_blobs)
    assert dataset.train_inputs.shape == (1437, 64) and dataset.test_inputs.shape == (360, 64)
    assert dataset.train_inputs.dtype == torch.float32 and float(dataset.train_inputs.max()) <= 1.0
    assert set(dataset.train_targets.tolist()) == set(range(10))


def test_a_shard_with_the_wrong_bytes_is_refused(digits_blobs):
    blobs = digits_blobs.all_blobs()
    victim = next(iter(digits_blobs.shards))

    def fetch(digest):
        data = blobs[digest]
        return data[:-1] + bytes([data[-1] ^ 1]) if digest == victim else data

    with pytest.raises(DatasetError, match="does not match its hash"):
        load_dataset(digits_blobs.manifest_hash, fetch)


def test_unknown_dataset_names_fail_clearly():
    with pytest.raises(DatasetError, match="unknown dataset"):
        build_dataset("imagenet")


def test_pycorpus_windows_are_next_character_pairs():
    blobs = build_dataset("pycorpus", max_bytes=50_000, context=32)
    dataset = dataset_from_blobs(blobs)
    assert dataset.shape.kind == "text" and dataset.shape.context == 32 and dataset.shape.num_classes == 256
    assert dataset.train_inputs.shape[1] == 32
    assert torch.equal(dataset.train_inputs[0, 1:], dataset.train_targets[0, :-1])


names = st.text(alphabet="abcdefgh./_", min_size=1, max_size=12)
tensors = st.dictionaries(names, st.sampled_from([torch.float32, torch.int64, torch.uint8, torch.float16]).flatmap(
    lambda dtype: st.lists(st.integers(0, 5), min_size=0, max_size=3).map(
        lambda shape: torch.arange(int(torch.tensor(shape).prod()) if shape else 1).reshape(shape).to(dtype))),
    max_size=5)


@settings(max_examples=80, deadline=None)
@given(tensors)
def test_canonical_bytes_round_trip_and_ignore_insertion_order(values):
    data = encode_tensors(values)
    decoded = decode_tensors(data)
    assert set(decoded) == set(values)
    for name, tensor in values.items():
        assert decoded[name].dtype == tensor.dtype and torch.equal(decoded[name], tensor)
    assert encode_tensors(dict(reversed(list(values.items())))) == data
    assert hash_tensors(values) == hashlib.sha256(data).digest()
    with pytest.raises(EncodingError):
        decode_tensors(data + b"\x00")


def test_canonical_bytes_are_little_endian_with_a_dtype_and_shape_header():
    data = encode_tensors({"w": torch.tensor([1.0, 2.0])})
    assert data == b"TRLT\x01" + (1).to_bytes(4, "little") + b"\x01\x00w" + b"\x01\x01" + (2).to_bytes(8, "little") \
        + bytes.fromhex("0000803f00000040")


def test_canonical_decoding_refuses_names_out_of_order():
    first = encode_tensors({"b": torch.zeros(1)})
    second = encode_tensors({"a": torch.zeros(1)})
    swapped = b"TRLT\x01" + (2).to_bytes(4, "little") + first[9:] + second[9:]
    with pytest.raises(EncodingError, match="ascending"):
        decode_tensors(swapped)


def test_merkle_root_follows_the_protocol_rules():
    leaves = [hashlib.sha256(bytes([i])).digest() for i in range(3)]
    expected = node_hash(node_hash(leaf_hash(leaves[0]), leaf_hash(leaves[1])), leaf_hash(leaves[2]))
    assert merkle_root(leaves) == expected
    assert merkle_root(leaves[:1]) == leaf_hash(leaves[0])


@pytest.mark.parametrize("count", range(1, 12))
def test_merkle_proofs_verify_for_every_leaf_and_fail_when_tampered(count):
    leaves = [hashlib.sha256(bytes([i])).digest() for i in range(count)]
    root = merkle_root(leaves)
    for index in range(count):
        proof = merkle_proof(leaves, index)
        assert verify_proof(root, leaves[index], index, count, proof)
        assert not verify_proof(root, hashlib.sha256(b"forged").digest(), index, count, proof)
        if count > 1:
            assert not verify_proof(root, leaves[index], (index + 1) % count, count, proof)


def test_merkle_refuses_empty_trees_and_bad_leaves():
    with pytest.raises(MerkleError):
        merkle_root([])
    with pytest.raises(MerkleError):
        merkle_root([b"short"])
    with pytest.raises(MerkleError):
        merkle_proof([bytes(32)], 1)
