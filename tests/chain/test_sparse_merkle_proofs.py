"""The Merkle tree's hashing rules and proofs (`trolly.chain.sparse_merkle`), checked against hand computation.

`independent_verify` below is a client's re-implementation written only from the module docstring; it must
agree with `verify_proof` on every proof, which is what shows the docstring is enough to verify proofs.
"""

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trolly.chain.sparse_merkle import EMPTY_ROOT, PROOF_OP_TYPE, MemoryTree, decode_proof, verify_proof


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def nibbles(digest: bytes) -> list[int]:
    return [n for byte in digest for n in (byte >> 4, byte & 15)]


def keys_with_first_nibbles(wanted: list[int], count: int, start: int = 0) -> list[bytes]:
    """Keys whose sha256 starts with the nibbles `wanted` (found by counting; deterministic)."""
    found = []
    i = start
    while len(found) < count:
        key = b"key-%d" % i
        if nibbles(sha(key))[:len(wanted)] == wanted:
            found.append(key)
        i += 1
    return found


def independent_verify(root: bytes, key: bytes, value: bytes | None, proof: bytes) -> bool:
    """Proof verification from the docstring of trolly.chain.sparse_merkle alone (a client's implementation)."""
    if len(proof) < 3 or proof[0] != 1 or proof[1] > 64:
        return False
    depth, pos, levels = proof[1], 2, []
    path = nibbles(sha(key))
    for level in range(depth):
        if pos + 2 > len(proof):
            return False
        bitmap = int.from_bytes(proof[pos:pos + 2], "big")
        pos += 2
        if bitmap >> path[level] & 1:
            return False
        slots = [bytes(32)] * 16
        for j in range(16):
            if bitmap >> j & 1:
                if pos + 32 > len(proof):
                    return False
                slots[j] = proof[pos:pos + 32]
                pos += 32
        levels.append(slots)
    if pos >= len(proof):
        return False
    kind = proof[pos]
    if kind == 0 and pos + 1 == len(proof):
        if value is not None:
            return False
        current = bytes(32)
    elif kind == 1 and pos + 65 == len(proof):
        other_key_hash, other_value_hash = proof[pos + 1:pos + 33], proof[pos + 33:pos + 65]
        if value is None:
            if other_key_hash == sha(key) or nibbles(other_key_hash)[:depth] != path[:depth]:
                return False
        elif (other_key_hash, other_value_hash) != (sha(key), sha(value)):
            return False
        current = sha(b"\x00" + other_key_hash + other_value_hash)
    else:
        return False
    for level in reversed(range(depth)):
        slots = list(levels[level])
        slots[path[level]] = current
        current = sha(b"\x01" + b"".join(slots))
    return current == root


def test_proof_op_type_is_the_documented_name():
    assert PROOF_OP_TYPE == "trolly:smt"


def test_empty_tree_root_is_32_zero_bytes():
    assert MemoryTree().root() == EMPTY_ROOT == bytes(32)


def test_single_key_root_is_its_leaf_hash():
    assert MemoryTree({b"a": b"1"}).root() == sha(b"\x00" + sha(b"a") + sha(b"1"))


def test_keys_differing_in_first_nibble_hang_under_the_root():
    first = keys_with_first_nibbles([3], 1)[0]
    second = keys_with_first_nibbles([12], 1)[0]
    slots = [bytes(32)] * 16
    slots[3] = sha(b"\x00" + sha(first) + sha(b"x"))
    slots[12] = sha(b"\x00" + sha(second) + sha(b"y"))
    assert MemoryTree({first: b"x", second: b"y"}).root() == sha(b"\x01" + b"".join(slots))


def test_keys_sharing_a_nibble_sit_one_level_down_at_their_shortest_unique_prefix():
    a, b = keys_with_first_nibbles([7, 1], 1)[0], keys_with_first_nibbles([7, 9], 1)[0]
    c = keys_with_first_nibbles([2], 1)[0]
    inner = [bytes(32)] * 16
    inner[1] = sha(b"\x00" + sha(a) + sha(b"A"))
    inner[9] = sha(b"\x00" + sha(b) + sha(b"B"))
    top = [bytes(32)] * 16
    top[7] = sha(b"\x01" + b"".join(inner))
    top[2] = sha(b"\x00" + sha(c) + sha(b"C"))
    assert MemoryTree({a: b"A", b: b"B", c: b"C"}).root() == sha(b"\x01" + b"".join(top))


def test_insertion_order_does_not_change_the_root():
    items = {b"k%d" % i: b"v%d" % i for i in range(40)}
    forward = MemoryTree()
    for key in sorted(items):
        forward.apply({key: items[key]})
    backward = MemoryTree()
    for key in sorted(items, reverse=True):
        backward.apply({key: items[key]})
    assert forward.root() == backward.root() == MemoryTree(items).root()


def test_non_membership_covers_both_an_empty_slot_and_a_different_leaf():
    tree = MemoryTree({b"k%d" % i: b"v" for i in range(20)})
    kinds = set()
    for i in range(200):
        key = b"absent-%d" % i
        value, proof = tree.prove(key)
        assert value is None
        assert verify_proof(tree.root(), key, None, proof) and independent_verify(tree.root(), key, None, proof)
        kinds.add(decode_proof(proof).terminal is None)
    assert kinds == {True, False}


def test_membership_proof_fails_for_a_wrong_value_and_as_an_absence_proof():
    tree = MemoryTree({b"k%d" % i: b"v%d" % i for i in range(10)})
    value, proof = tree.prove(b"k3")
    assert value == b"v3" and verify_proof(tree.root(), b"k3", b"v3", proof)
    assert not verify_proof(tree.root(), b"k3", b"v4", proof)
    assert not verify_proof(tree.root(), b"k3", None, proof)
    assert not verify_proof(tree.root(), b"k4", b"v3", proof)


def test_absence_proof_does_not_prove_a_value():
    tree = MemoryTree({b"k%d" % i: b"v%d" % i for i in range(10)})
    _, proof = tree.prove(b"nope")
    assert verify_proof(tree.root(), b"nope", None, proof)
    assert not verify_proof(tree.root(), b"nope", b"", proof)


def test_leaf_of_another_key_off_the_path_is_no_absence_proof():
    """A real leaf that does not share the key's path prefix proves nothing about the key."""
    a = keys_with_first_nibbles([5], 1)[0]
    b = keys_with_first_nibbles([6], 1)[0]
    tree = MemoryTree({a: b"x", b: b"y"})
    _, proof_of_b = tree.prove(b)
    outsider = keys_with_first_nibbles([5], 1, start=10_000)[0]
    assert outsider not in tree.items
    assert not verify_proof(tree.root(), outsider, None, proof_of_b)


def test_empty_tree_proves_every_absence_and_nothing_else():
    value, proof = MemoryTree().prove(b"x")
    assert value is None and verify_proof(EMPTY_ROOT, b"x", None, proof)
    assert not verify_proof(EMPTY_ROOT, b"x", b"", proof)
    assert not verify_proof(sha(b"other root"), b"x", None, proof)


key_strategy = st.binary(min_size=1, max_size=6)
items_strategy = st.dictionaries(key_strategy, st.binary(max_size=8), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=items_strategy, probe=key_strategy, data=st.data())
def test_any_single_byte_change_of_proof_value_or_root_is_rejected(items, probe, data):
    tree = MemoryTree(items)
    key = data.draw(st.sampled_from(sorted(items))) if items and data.draw(st.booleans()) else probe
    root = tree.root()
    value, proof = tree.prove(key)
    assert verify_proof(root, key, value, proof)
    assert independent_verify(root, key, value, proof)

    def flipped(blob: bytes) -> bytes:
        index = data.draw(st.integers(0, len(blob) - 1))
        mask = data.draw(st.integers(1, 255))
        return blob[:index] + bytes([blob[index] ^ mask]) + blob[index + 1:]

    assert not verify_proof(root, key, value, flipped(proof))
    assert not verify_proof(flipped(root), key, value, proof)
    if value:
        assert not verify_proof(root, key, flipped(value), proof)
    assert not verify_proof(root, key, value, proof + b"\x00")
    assert not verify_proof(root, key, value, proof[:-1])


@settings(max_examples=40, deadline=None)
@given(items=items_strategy, probes=st.lists(key_strategy, max_size=5))
def test_independent_verifier_agrees_with_verify_proof(items, probes):
    tree = MemoryTree(items)
    root = tree.root()
    for key in list(items)[:5] + probes:
        value, proof = tree.prove(key)
        assert value == items.get(key)
        for candidate in (value, None, b"other"):
            assert verify_proof(root, key, candidate, proof) == independent_verify(root, key, candidate, proof)


@settings(max_examples=200, deadline=None)
@given(root=st.binary(max_size=40), key=st.binary(max_size=8), value=st.none() | st.binary(max_size=8),
       proof=st.binary(max_size=200))
def test_verify_proof_never_raises_on_garbage(root, key, value, proof):
    assert verify_proof(root, key, value, proof) in (True, False)


@pytest.mark.parametrize("key, value", [("x", None), (b"x", "text"), (None, None), (5, b"")])
def test_arguments_of_the_wrong_type_are_false_not_an_exception(key, value):
    assert verify_proof(EMPTY_ROOT, key, value, b"\x01\x00\x00") is False
    assert verify_proof("root", b"x", None, b"\x01\x00\x00") is False
    assert verify_proof(EMPTY_ROOT, b"x", None, "proof") is False
    assert verify_proof(EMPTY_ROOT, b"x", None, b"\x01\x00\x00") is True


@pytest.mark.parametrize("proof", [b"", b"\x01", b"\x02\x00\x00", b"\x01\x41\x00", b"\x01\x00\x02", b"\x01\x00\x00\x00"])
def test_malformed_proofs_are_rejected(proof):
    assert not verify_proof(EMPTY_ROOT, b"x", None, proof)
