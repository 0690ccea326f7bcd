"""The Merkle tree's hashing rules (`trolly.chain.sparse_merkle`), checked against hand computation. Its query
proofs are ICS23's: tests/chain/test_ics23_proofs.py."""

import hashlib

from trolly.chain.sparse_merkle import EMPTY_ROOT, MemoryTree


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
