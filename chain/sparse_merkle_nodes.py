"""The incremental form of the Merkle tree in `sparse_merkle.py`: stored nodes and batched updates.

`sparse_merkle.MemoryTree` rebuilds everything from the key set; a node cannot. This module keeps the tree as nodes
addressed by their *path*: the nibbles from the root to the node written as lower-case hex digits (the root
is "", the child in slot 10 of the root is "a"), which is also a prefix of `sha256(key).hex()` for every key
below it. Only the latest version exists, and a node's storage key never depends on history. The hashing
rules are those of `sparse_merkle.py`, so roots are identical to the reference's (tests compare
them on random histories; `ics23_proofs.py` makes query proofs from these nodes).

A node *is* its hash preimage, kept as bytes:

    leaf record     = 0x00 || key_hash || value_hash                      (65 bytes)
    internal record = 0x01 || child_0 || ... || child_15                  (513 bytes, EMPTY_HASH for none)
    node hash       = sha256(record)

so storing, loading and hashing a node need no encoding step. (The zero runs of empty slots cost little on
disk: LevelDB compresses blocks.)

`update_tree` applies one block's changes in one pass: the changed keys are sorted by hash and each touched
node is loaded once and hashed once per block; untouched subtrees are never read; the result lists exactly
which nodes to write and which stale paths to delete. Leaves are the only nodes that move: a leaf sinks
when a new key lands on its prefix and rises when its last sibling goes (an internal node exists exactly
where two or more keys share a prefix). Pure: the caller supplies a `NodeSource` (LevelDB behind a cache in
the store, a dict in tests) and persists the result.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from .sparse_merkle import EMPTY_HASH, EMPTY_ROOT, HASH_LENGTH, INTERNAL_PREFIX, LEAF_PREFIX

_sha256 = hashlib.sha256
_HEX_DIGITS = "0123456789abcdef"
_NEXT_DIGIT = {digit: (_HEX_DIGITS[i + 1] if i < 15 else "g") for i, digit in enumerate(_HEX_DIGITS)}
"""The digit after each hex digit; "g" sorts after "f", closing the last slot's range."""
_SLOT_OF = {digit: i for i, digit in enumerate(_HEX_DIGITS)}
_OFFSET_OF = {digit: 1 + HASH_LENGTH * i for i, digit in enumerate(_HEX_DIGITS)}
"""Where the child hash of each slot starts in an internal record."""
LEAF_RECORD_LENGTH = 1 + 2 * HASH_LENGTH
INTERNAL_RECORD_LENGTH = 1 + 16 * HASH_LENGTH
EMPTY_INTERNAL = INTERNAL_PREFIX + EMPTY_HASH * 16


def leaf_record(key_hash: bytes, value_hash: bytes) -> bytes:
    return LEAF_PREFIX + key_hash + value_hash


def is_leaf(record: bytes) -> bool:
    return record[0] == 0


def child_hash(record: bytes, slot: int) -> bytes:
    """The hash in slot `slot` (0..15) of an internal record."""
    offset = 1 + HASH_LENGTH * slot
    return record[offset:offset + HASH_LENGTH]


def node_hash(record: bytes) -> bytes:
    return _sha256(record).digest()


def check_record(record: bytes) -> bytes:
    """`record` if it is a well-formed node, else ValueError (for records read back from disk)."""
    if not ((len(record) == LEAF_RECORD_LENGTH and record[:1] == LEAF_PREFIX)
            or (len(record) == INTERNAL_RECORD_LENGTH and record[:1] == INTERNAL_PREFIX)):
        raise ValueError(f"corrupt tree node record ({len(record)} bytes)")
    return record


class NodeSource(Protocol):
    def get_node(self, path: str) -> bytes | None:
        """The node record stored at `path` (hex nibbles from the root), or None."""
        ...


@dataclass
class TreeUpdate:
    """The outcome of `update_tree`: the new root, the node records to write and the stale paths to delete."""

    root_hash: bytes
    writes: dict[str, bytes] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)


class _Updater:
    """One batched update. Updates are three parallel lists sorted by key hash; a subtree's updates are the
    index range [low, high) whose hex key hashes start with the subtree's path."""

    def __init__(self, source: NodeSource, hexes: list[str], key_hashes: list[bytes], value_hashes: list) -> None:
        self.source = source
        self.hexes = hexes
        self.key_hashes = key_hashes
        self.value_hashes = value_hashes
        self.loaded: set[str] = set()  # paths where a node existed before this update
        self.writes: dict[str, bytes] = {}

    def load(self, path: str) -> bytes | None:
        record = self.source.get_node(path)
        if record is not None:
            self.loaded.add(path)
        return record

    def update(self, path: str, record: bytes | None, low: int, high: int) -> bytes | None:
        """The new record for `path` (not written here: the caller places it); writes everything below it."""
        if record is None or record[0] == 0:
            if record is not None and high - low == 1 and record[1:33] == self.key_hashes[low]:
                value_hash = self.value_hashes[low]  # the common case: one leaf changes in place
                return None if value_hash is None else LEAF_PREFIX + self.key_hashes[low] + value_hash
            leaves = {record[1:33]: record[33:65]} if record is not None else {}
            for index in range(low, high):
                if self.value_hashes[index] is None:
                    leaves.pop(self.key_hashes[index], None)
                else:
                    leaves[self.key_hashes[index]] = self.value_hashes[index]
            return self.build(path, sorted(leaves.items()))
        depth = len(path)
        children = bytearray(record)
        changed: dict[str, bytes] = {}
        may_collapse = False
        hexes = self.hexes
        get_node = self.source.get_node
        loaded = self.loaded
        key_hashes = self.key_hashes
        start = low
        while start < high:  # each slot's updates are a contiguous range of the sorted hashes
            digit = hexes[start][depth]
            child_path = path + digit
            end = bisect.bisect_left(hexes, path + _NEXT_DIGIT[digit], start, high)
            offset = _OFFSET_OF[digit]
            if record.startswith(EMPTY_HASH, offset):  # (startswith compares in place, without a slice)
                child = None
            else:
                child = get_node(child_path)
                loaded.add(child_path)  # a non-empty slot always has its node stored
            if end - start == 1 and child is not None and child[0] == 0 and child.startswith(key_hashes[start], 1):
                value_hash = self.value_hashes[start]  # the common case, inline: one leaf changes in place
                new_child = None if value_hash is None else LEAF_PREFIX + key_hashes[start] + value_hash
            else:
                new_child = self.update(child_path, child, start, end)
            if new_child is None:
                children[offset:offset + HASH_LENGTH] = EMPTY_HASH
                may_collapse = may_collapse or child is not None
            else:
                children[offset:offset + HASH_LENGTH] = _sha256(new_child).digest()
                changed[child_path] = new_child
                # an internal child that shrank to a leaf may leave this node with a lone leaf
                may_collapse = may_collapse or (new_child[0] == 0 and child is not None and child[0] == 1)
            start = end
        if may_collapse:
            occupied = [s for s in range(16) if children[1 + HASH_LENGTH * s:1 + HASH_LENGTH * (s + 1)] != EMPTY_HASH]
            if not occupied:
                return None
            if len(occupied) == 1:
                only_path = path + _HEX_DIGITS[occupied[0]]
                survivor = changed[only_path] if only_path in changed else self.source.get_node(only_path)
                if survivor[0] == 0:
                    if only_path not in changed:
                        self.loaded.add(only_path)  # it rises, so its old path becomes stale
                    return survivor  # a lone leaf rises to this path
        self.writes.update(changed)
        return bytes(children)

    def build(self, path: str, leaves: list[tuple[bytes, bytes]]) -> bytes | None:
        """A subtree from scratch for sorted (key_hash, value_hash) leaves; writes every node below `path`."""
        if not leaves:
            return None
        if len(leaves) == 1:
            return LEAF_PREFIX + leaves[0][0] + leaves[0][1]
        depth = len(path)
        groups: dict[str, list[tuple[bytes, bytes]]] = {}
        for leaf in leaves:
            groups.setdefault(leaf[0].hex()[depth], []).append(leaf)
        children = bytearray(EMPTY_INTERNAL)
        for digit, group in groups.items():
            child = self.build(path + digit, group)
            self.writes[path + digit] = child
            offset = 1 + HASH_LENGTH * _SLOT_OF[digit]
            children[offset:offset + HASH_LENGTH] = _sha256(child).digest()
        return bytes(children)


def update_tree(source: NodeSource, changes: Iterable[tuple[bytes, bytes | None]]) -> TreeUpdate:
    """Apply (key_hash, value_hash or None to delete) pairs, each key hash at most once, to the tree in `source`.

    Reads only the touched paths; returns the new root hash, the records to write and the stale paths.
    """
    ordered = sorted(changes)
    hexes = [key_hash.hex() for key_hash, _ in ordered]
    updater = _Updater(source, hexes, [k for k, _ in ordered], [v for _, v in ordered])
    root = updater.load("")
    if not ordered:
        return TreeUpdate(EMPTY_ROOT if root is None else node_hash(root))
    new_root = updater.update("", root, 0, len(ordered))
    if new_root is not None:
        updater.writes[""] = new_root
    deletes = updater.loaded - updater.writes.keys()
    return TreeUpdate(EMPTY_ROOT if new_root is None else node_hash(new_root), updater.writes, deletes)


def root_hash(source: NodeSource) -> bytes:
    root = source.get_node("")
    return EMPTY_ROOT if root is None else node_hash(root)


class DictNodeSource:
    """Node records held in a dict: the in-memory node store for tests and tools."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}

    def get_node(self, path: str) -> bytes | None:
        return self.nodes.get(path)

    def apply(self, update: TreeUpdate) -> None:
        for path in update.deletes:
            del self.nodes[path]
        self.nodes.update(update.writes)
