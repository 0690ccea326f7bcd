"""ICS23 proofs of the state tree (`trolly.chain.ics23_proofs`) and their verifier (`trolly.wallet.ics23`).

The proofs must lead to the same root as the from-scratch reference tree, hold exactly for the key and value
they prove, and the verifier must refuse every forgery a lying node could send: a tampered value, another
key, a neighbour dropped or swapped so that a present key looks absent.
"""

import hashlib
import random

import pytest

from trolly.chain.ics23_proofs import (
    EXIST_OP_TYPE,
    NONEXIST_OP_TYPE,
    TROLLY_HASHED_SPEC,
    TROLLY_SPEC,
    prove_key,
)
from trolly.chain.proto import ics23_pb2 as ics23
from trolly.chain.sparse_merkle import MemoryTree, key_hash, value_hash
from trolly.chain.sparse_merkle_nodes import DictNodeSource, update_tree
from trolly.wallet.errors import ProofInvalid
from trolly.wallet.ics23 import decode_commitment_proof, verify_non_existence
from trolly.wallet.proofs import check_proof, proof_holds


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def tree_of(items: dict[bytes, bytes]) -> tuple[DictNodeSource, bytes]:
    source = DictNodeSource()
    source.apply(update_tree(source, [(key_hash(k), value_hash(v)) for k, v in items.items()]))
    root = MemoryTree(items).root()
    return source, root


def random_items(seed: int, count: int) -> dict[bytes, bytes]:
    rng = random.Random(seed)
    return {b"key-%d-%d" % (seed, i): rng.randbytes(rng.randint(0, 20)) for i in range(count)}


def test_spec_is_the_documented_one():
    leaf = TROLLY_SPEC.leaf_spec
    assert (leaf.hash, leaf.prehash_key, leaf.prehash_value, leaf.length, leaf.prefix) == (
        ics23.SHA256, ics23.SHA256, ics23.SHA256, ics23.NO_PREFIX, b"\x00")
    inner = TROLLY_SPEC.inner_spec
    assert (list(inner.child_order), inner.child_size, inner.min_prefix_length, inner.max_prefix_length,
            inner.empty_child, inner.hash) == (list(range(16)), 32, 1, 1, bytes(32), ics23.SHA256)
    assert (TROLLY_SPEC.max_depth, TROLLY_SPEC.min_depth, TROLLY_SPEC.prehash_key_before_comparison) == (64, 0, True)
    hashed = TROLLY_HASHED_SPEC.leaf_spec
    assert (hashed.prehash_key, hashed.prehash_value, hashed.prefix) == (ics23.NO_HASH, ics23.NO_HASH, b"\x00")
    assert TROLLY_HASHED_SPEC.inner_spec == inner and not TROLLY_HASHED_SPEC.prehash_key_before_comparison


def test_an_existence_proof_recomputes_the_root_by_hand():
    """A client's computation from the ICS23 rules alone: leaf, then prefix || child || suffix per step."""
    items = random_items(1, 60)
    source, root = tree_of(items)
    key = next(iter(items))
    proof_type, data = prove_key(source, key, items[key])
    exist = decode_commitment_proof(data).exist
    assert (proof_type, exist.key, exist.value) == (EXIST_OP_TYPE, key, items[key])
    current = sha(b"\x00" + sha(key) + sha(items[key]))
    for op in exist.path:
        assert op.prefix[:1] == b"\x01" and len(op.prefix) + len(op.suffix) == 1 + 15 * 32
        current = sha(op.prefix + current + op.suffix)
    assert current == root


@pytest.mark.parametrize("count", [1, 2, 3, 16, 40, 300])
def test_every_key_is_proven_present_or_absent(count):
    items = random_items(count, count)
    source, root = tree_of(items)
    for key in list(items)[:40]:
        proof_type, proof = prove_key(source, key, items[key])
        assert proof_holds(root, key, items[key], proof_type, proof)
        assert not proof_holds(root, key, items[key] + b"!", proof_type, proof)  # a tampered value
        assert not proof_holds(root, key + b"!", items[key], proof_type, proof)  # another key
        assert not proof_holds(root, key, None, proof_type, proof)
        assert not proof_holds(sha(b"another root"), key, items[key], proof_type, proof)
    for i in range(60):
        absent = b"absent-%d" % i
        proof_type, proof = prove_key(source, absent, None)
        assert proof_type == NONEXIST_OP_TYPE
        assert proof_holds(root, absent, None, proof_type, proof)
        assert not proof_holds(root, absent, b"", proof_type, proof)
        assert not proof_holds(sha(b"another root"), absent, None, proof_type, proof)


def test_absence_is_proven_across_empty_slots_between_the_neighbours():
    """Stock ICS23 verifiers need the neighbours in adjacent slots; Trolly's tree often has empty ones between,
    which the verifier accepts only after checking that each is empty."""
    items = random_items(7, 20)
    source, root = tree_of(items)
    gaps = 0
    for i in range(200):
        absent = b"gap-%d" % i
        proof_type, proof = prove_key(source, absent, None)
        nonexist = decode_commitment_proof(proof).nonexist
        check_proof(root, absent, None, proof_type, proof)
        if nonexist.HasField("left") and nonexist.HasField("right"):
            left_slot = (len(nonexist.left.path[-1].prefix) - 1) // 32
            right_slot = (len(nonexist.right.path[-1].prefix) - 1) // 32
            gaps += right_slot - left_slot > 1
    assert gaps > 0


def _nonexist_with_two_neighbours(items, source, root):
    ordered = sorted(items, key=key_hash)
    for i in range(200):
        absent = b"probe-%d" % i
        nonexist = decode_commitment_proof(prove_key(source, absent, None)[1]).nonexist
        if nonexist.HasField("left") and nonexist.HasField("right"):
            return absent, nonexist, ordered
    raise AssertionError("no absent key between two leaves")


def test_a_present_key_cannot_be_proven_absent_by_skipping_it():
    """Attack: a node hides a present key by pairing its left neighbour with the leaf after it."""
    items = random_items(3, 40)
    source, root = tree_of(items)
    ordered = sorted(items, key=key_hash)
    for index in range(1, len(ordered) - 1):
        hidden = ordered[index]
        left = decode_commitment_proof(prove_key(source, ordered[index - 1], items[ordered[index - 1]])[1]).exist
        right = decode_commitment_proof(prove_key(source, ordered[index + 1], items[ordered[index + 1]])[1]).exist
        forged = ics23.NonExistenceProof(key=key_hash(hidden))
        for side, exist in (("left", left), ("right", right)):
            getattr(forged, side).CopyFrom(ics23.ExistenceProof(
                key=key_hash(exist.key), value=value_hash(exist.value), leaf=TROLLY_HASHED_SPEC.leaf_spec,
                path=exist.path))
        with pytest.raises(ProofInvalid, match="not next to each other"):
            verify_non_existence(forged, TROLLY_HASHED_SPEC, root, key_hash(hidden))


def test_dropping_a_neighbour_does_not_prove_absence():
    """Attack: a one-sided proof claims the key lies beyond the last (or before the first) leaf."""
    items = random_items(5, 40)
    source, root = tree_of(items)
    absent, nonexist, _ = _nonexist_with_two_neighbours(items, source, root)
    for side in ("left", "right"):
        forged = ics23.NonExistenceProof()
        forged.CopyFrom(nonexist)
        forged.ClearField(side)
        with pytest.raises(ProofInvalid):
            verify_non_existence(forged, TROLLY_HASHED_SPEC, root, key_hash(absent))


def test_garbage_and_wrong_types_are_refused_with_a_reason():
    items = random_items(9, 10)
    source, root = tree_of(items)
    key = next(iter(items))
    proof_type, proof = prove_key(source, key, items[key])
    with pytest.raises(ProofInvalid, match="not an ICS23"):
        check_proof(root, key, items[key], proof_type, b"\xff\xff\xff")
    with pytest.raises(ProofInvalid, match="needs a"):
        check_proof(root, key, None, proof_type, proof)
    for cut in (1, len(proof) // 2, len(proof) - 1):
        assert not proof_holds(root, key, items[key], proof_type, proof[:cut])
