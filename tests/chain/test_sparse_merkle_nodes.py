"""The incremental node tree (`trolly.chain.sparse_merkle_nodes`) against the from-scratch reference (`MemoryTree`).

The reference rebuilds from the key set; the batched, path-addressed version must give the same
root after any history, with ICS23 proofs that verify against it, and its stored nodes must be exactly those of a tree
built from scratch (so no stale node survives and storage is history-independent too).
"""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from trolly.chain.ics23_proofs import prove_key
from trolly.chain.sparse_merkle import EMPTY_ROOT, MemoryTree, key_hash, value_hash
from trolly.chain.sparse_merkle_nodes import (
    DictNodeSource,
    check_record,
    child_hash,
    is_leaf,
    leaf_record,
    node_hash,
    root_hash,
    update_tree,
)
from trolly.wallet.proofs import proof_holds


def hashed(changes: dict[bytes, bytes | None]) -> list[tuple[bytes, bytes | None]]:
    return [(key_hash(k), None if v is None else value_hash(v)) for k, v in changes.items()]


def built_from_scratch(items: dict[bytes, bytes]) -> dict:
    source = DictNodeSource()
    source.apply(update_tree(source, hashed(items)))
    return source.nodes


def apply_block(source: DictNodeSource, changes: dict[bytes, bytes | None]) -> bytes:
    update = update_tree(source, hashed(changes))
    source.apply(update)
    assert root_hash(source) == update.root_hash
    return update.root_hash


keys = st.binary(min_size=1, max_size=3)  # a small key space, so later blocks delete and overwrite earlier keys
blocks = st.lists(st.dictionaries(keys, st.none() | st.binary(max_size=4), max_size=25), min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(history=blocks, probes=st.lists(keys, max_size=6))
def test_incremental_tree_matches_the_reference_after_every_block(history, probes):
    source = DictNodeSource()
    reference = MemoryTree()
    for changes in history:
        root = apply_block(source, changes)
        reference.apply(changes)
        assert root == reference.root()
        assert source.nodes == built_from_scratch(reference.items)
        for key in list(reference.items)[:6] + probes if root != EMPTY_ROOT else []:
            value = reference.items.get(key)
            proof_type, proof = prove_key(source, key, value)
            assert proof_holds(root, key, value, proof_type, proof)


@settings(max_examples=40, deadline=None)
@given(history=blocks, seed=st.integers(0, 2**32))
def test_any_order_of_the_same_net_changes_gives_the_same_root_and_nodes(history, seed):
    """History independence: replaying the final set one key at a time in random order is indistinguishable."""
    source = DictNodeSource()
    final: dict[bytes, bytes] = {}
    for changes in history:
        apply_block(source, changes)
        for key, value in changes.items():
            if value is None:
                final.pop(key, None)
            else:
                final[key] = value
    shuffled = list(final.items())
    random.Random(seed).shuffle(shuffled)
    other = DictNodeSource()
    for key, value in shuffled:
        apply_block(other, {key: value})
    assert root_hash(other) == root_hash(source) == MemoryTree(final).root()
    assert other.nodes == source.nodes


def test_deleting_every_key_leaves_no_node_and_the_empty_root():
    source = DictNodeSource()
    items = {b"k%d" % i: b"v" for i in range(300)}
    apply_block(source, items)
    assert len(source.nodes) > 300
    for chunk in range(0, 300, 70):
        apply_block(source, {b"k%d" % i: None for i in range(chunk, min(chunk + 70, 300))})
    assert source.nodes == {} and root_hash(source) == EMPTY_ROOT


def test_a_lone_leaf_rises_when_its_sibling_is_deleted():
    source = DictNodeSource()
    apply_block(source, {b"a": b"1", b"b": b"2"})
    apply_block(source, {b"b": None})
    assert list(source.nodes) == [""] and is_leaf(source.nodes[""])
    assert root_hash(source) == MemoryTree({b"a": b"1"}).root()


def test_update_reads_only_the_touched_paths():
    class CountingSource(DictNodeSource):
        def __init__(self):
            super().__init__()
            self.reads = []

        def get_node(self, path):
            self.reads.append(path)
            return super().get_node(path)

    source = CountingSource()
    source.apply(update_tree(source, hashed({b"k%d" % i: b"v" for i in range(2000)})))
    source.reads.clear()
    update_tree(source, hashed({b"k5": b"changed"}))
    target = key_hash(b"k5").hex()
    assert all(target.startswith(read) for read in source.reads)
    assert len(source.reads) <= 5


def test_no_changes_keep_the_root_and_write_nothing():
    source = DictNodeSource()
    apply_block(source, {b"x": b"1", b"y": b"2"})
    update = update_tree(source, [])
    assert update.root_hash == MemoryTree({b"x": b"1", b"y": b"2"}).root()
    assert not update.writes and not update.deletes


def test_deleting_absent_keys_changes_nothing():
    source = DictNodeSource()
    apply_block(source, {b"k%d" % i: b"v" for i in range(50)})
    before = dict(source.nodes)
    apply_block(source, {b"absent-%d" % i: None for i in range(50)})
    assert source.nodes == before


def test_records_are_hash_preimages_following_the_documented_rules():
    source = DictNodeSource()
    items = {b"k%d" % i: b"v%d" % i for i in range(40)}
    apply_block(source, items)
    for path, record in source.nodes.items():
        assert check_record(record) is record
        if is_leaf(record):
            key = next(k for k in items if key_hash(k) == record[1:33])
            assert record == leaf_record(key_hash(key), value_hash(items[key]))
            assert key_hash(key).hex().startswith(path)
        else:
            for slot in range(16):
                child = source.nodes.get(path + "0123456789abcdef"[slot])
                assert child_hash(record, slot) == (bytes(32) if child is None else node_hash(child))


def test_corrupt_node_records_are_refused():
    for raw in (b"", b"\x00" + bytes(10), b"\x01" + bytes(64), b"\x02" + bytes(64), b"\x00" + bytes(512)):
        try:
            check_record(raw)
        except ValueError:
            continue
        raise AssertionError(f"accepted {raw!r}")
