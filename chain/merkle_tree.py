"""The incremental form of the Merkle tree in `merkle.py`: stored nodes, batched updates, proofs from nodes.

`merkle.MemoryTree` rebuilds everything from the key set; a node cannot. This module keeps the tree as nodes
addressed by their *path* (the nibbles from the root to the node, one nibble per byte; the root's path is
b""), so only the latest version exists and a node's storage key never depends on history. The same hashing
rules apply, so roots and proof bytes are identical to the reference's (tests compare them on random
histories).

`update_tree` applies one block's changes in one pass: the changed key hashes are sorted and grouped by
nibble, so every touched internal node is loaded once and hashed once per block, untouched subtrees are
never read, and the result lists exactly which nodes to write and which stale paths to delete. Leaves are
the only nodes that move: a leaf sinks when a new key lands on its prefix, and rises when its last sibling
goes (an internal node exists exactly where two or more keys share a prefix). Pure: the caller supplies
a `NodeSource` (a LevelDB reader with a cache in the store, a dict in tests) and persists the result.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from .merkle import EMPTY_HASH, EMPTY_ROOT, HASH_LENGTH, INTERNAL_PREFIX, LEAF_PREFIX, Proof, encode_proof

_sha256 = hashlib.sha256


class LeafNode:
    """A leaf: the hashes of its key and value; its own hash is the leaf hash of both."""

    __slots__ = ("key_hash", "value_hash", "hash")

    def __init__(self, key_hash: bytes, value_hash: bytes) -> None:
        self.key_hash = key_hash
        self.value_hash = value_hash
        self.hash = _sha256(LEAF_PREFIX + key_hash + value_hash).digest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeafNode) and other.key_hash == self.key_hash and other.value_hash == self.value_hash

    def __repr__(self) -> str:
        return f"LeafNode({self.key_hash.hex()[:12]}..)"


class InternalNode:
    """An internal node: its 16 child hashes (EMPTY_HASH where a slot is empty)."""

    __slots__ = ("children", "hash")

    def __init__(self, children: tuple[bytes, ...]) -> None:
        self.children = children
        self.hash = _sha256(INTERNAL_PREFIX + b"".join(children)).digest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InternalNode) and other.children == self.children

    def __repr__(self) -> str:
        return f"InternalNode({sum(c != EMPTY_HASH for c in self.children)} children)"


Node = LeafNode | InternalNode


def encode_node(node: Node) -> bytes:
    """Stored form: 0x00 || key_hash || value_hash, or 0x01 || bitmap (u16 BE, bit j = slot j) || hashes."""
    if isinstance(node, LeafNode):
        return LEAF_PREFIX + node.key_hash + node.value_hash
    bitmap = 0
    hashes = []
    for slot, child in enumerate(node.children):
        if child != EMPTY_HASH:
            bitmap |= 1 << slot
            hashes.append(child)
    return INTERNAL_PREFIX + bitmap.to_bytes(2, "big") + b"".join(hashes)


def decode_node(raw: bytes) -> Node:
    if raw[:1] == LEAF_PREFIX and len(raw) == 1 + 2 * HASH_LENGTH:
        return LeafNode(raw[1:33], raw[33:65])
    if raw[:1] == INTERNAL_PREFIX and len(raw) >= 3:
        bitmap = int.from_bytes(raw[1:3], "big")
        children = []
        position = 3
        for slot in range(16):
            if bitmap >> slot & 1:
                children.append(raw[position:position + HASH_LENGTH])
                position += HASH_LENGTH
            else:
                children.append(EMPTY_HASH)
        if position == len(raw):
            return InternalNode(tuple(children))
    raise ValueError(f"corrupt tree node record ({len(raw)} bytes)")


class NodeSource(Protocol):
    def get_node(self, path: bytes) -> Node | None:
        """The node stored at `path` (nibbles, one per byte), or None."""
        ...


@dataclass
class TreeUpdate:
    """The outcome of `update_tree`: the new root, the nodes to write and the stale paths to delete."""

    root_hash: bytes
    writes: dict[bytes, Node] = field(default_factory=dict)
    deletes: set[bytes] = field(default_factory=set)


# One nibble as a one-byte path step, precomputed (path + _STEP[j] is the child path).
_STEP = tuple(bytes([j]) for j in range(16))


def _nibble(key_hash: bytes, depth: int) -> int:
    byte = key_hash[depth >> 1]
    return byte & 0x0F if depth & 1 else byte >> 4


class _Updater:
    def __init__(self, source: NodeSource) -> None:
        self.source = source
        self.loaded: set[bytes] = set()  # paths where a node existed before this update
        self.writes: dict[bytes, Node] = {}

    def load(self, path: bytes) -> Node | None:
        node = self.source.get_node(path)
        if node is not None:
            self.loaded.add(path)
        return node

    def update(self, path: bytes, depth: int, node: Node | None, updates: list) -> Node | None:
        """The new node for `path` (not yet written: the caller places it). Writes everything below it."""
        if not isinstance(node, InternalNode):
            leaves = {node.key_hash: node.value_hash} if node is not None else {}
            for key_hash, value_hash in updates:
                if value_hash is None:
                    leaves.pop(key_hash, None)
                else:
                    leaves[key_hash] = value_hash
            return self.build(path, depth, sorted(leaves.items()))
        children = list(node.children)
        new_nodes: dict[int, Node] = {}
        start = 0
        count = len(updates)
        while start < count:  # updates are sorted by key hash, so each slot's updates are contiguous
            slot = _nibble(updates[start][0], depth)
            end = start + 1
            while end < count and _nibble(updates[end][0], depth) == slot:
                end += 1
            child_path = path + _STEP[slot]
            child = self.load(child_path) if children[slot] != EMPTY_HASH else None
            new_child = self.update(child_path, depth + 1, child, updates[start:end])
            if new_child is None:
                children[slot] = EMPTY_HASH
            else:
                children[slot] = new_child.hash
                new_nodes[slot] = new_child
            start = end
        occupied = [slot for slot in range(16) if children[slot] != EMPTY_HASH]
        if not occupied:
            return None
        if len(occupied) == 1:
            only = occupied[0]
            if only in new_nodes:
                survivor = new_nodes[only]
            else:
                survivor = self.source.get_node(path + _STEP[only])
                if isinstance(survivor, LeafNode):
                    self.loaded.add(path + _STEP[only])  # it rises, so its old path becomes stale
            if isinstance(survivor, LeafNode):
                return survivor  # a lone leaf rises to this path
        for slot, new_child in new_nodes.items():
            self.writes[path + _STEP[slot]] = new_child
        return InternalNode(tuple(children))

    def build(self, path: bytes, depth: int, leaves: list[tuple[bytes, bytes]]) -> Node | None:
        """A subtree from scratch for sorted (key_hash, value_hash) leaves; writes every node below `path`."""
        if not leaves:
            return None
        if len(leaves) == 1:
            return LeafNode(leaves[0][0], leaves[0][1])
        groups: list[list[tuple[bytes, bytes]]] = [[] for _ in range(16)]
        for leaf in leaves:
            groups[_nibble(leaf[0], depth)].append(leaf)
        children = []
        for slot, group in enumerate(groups):
            child = self.build(path + _STEP[slot], depth + 1, group) if group else None
            if child is None:
                children.append(EMPTY_HASH)
            else:
                self.writes[path + _STEP[slot]] = child
                children.append(child.hash)
        return InternalNode(tuple(children))


def update_tree(source: NodeSource, changes: Iterable[tuple[bytes, bytes | None]]) -> TreeUpdate:
    """Apply (key_hash, value_hash or None to delete) pairs, each key hash at most once, to the tree in `source`.

    Reads only the touched paths; returns the new root hash, the nodes to write and the stale paths to delete.
    """
    updates = sorted(changes)
    updater = _Updater(source)
    root = updater.load(b"")
    if not updates:
        return TreeUpdate(EMPTY_ROOT if root is None else root.hash)
    new_root = updater.update(b"", 0, root, updates)
    if new_root is not None:
        updater.writes[b""] = new_root
    deletes = updater.loaded - updater.writes.keys()
    return TreeUpdate(EMPTY_ROOT if new_root is None else new_root.hash, updater.writes, deletes)


def root_hash(source: NodeSource) -> bytes:
    root = source.get_node(b"")
    return EMPTY_ROOT if root is None else root.hash


def prove_from_nodes(source: NodeSource, key_hash: bytes) -> bytes:
    """Proof bytes (membership or non-membership, format of `merkle.py`) for the key with this hash."""
    levels = []
    path = b""
    node = source.get_node(path)
    depth = 0
    while isinstance(node, InternalNode):
        own_slot = _nibble(key_hash, depth)
        levels.append(tuple(
            None if slot == own_slot or child == EMPTY_HASH else child for slot, child in enumerate(node.children)
        ))
        if node.children[own_slot] == EMPTY_HASH:
            return encode_proof(Proof(tuple(levels), None))
        path += _STEP[own_slot]
        node = source.get_node(path)
        depth += 1
        if node is None:
            raise ValueError(f"tree is missing the node at path {path.hex()}")
    terminal = None if node is None else (node.key_hash, node.value_hash)
    return encode_proof(Proof(tuple(levels), terminal))


class DictNodeSource:
    """Nodes held in a dict: the in-memory node store for tests and tools."""

    def __init__(self) -> None:
        self.nodes: dict[bytes, Node] = {}

    def get_node(self, path: bytes) -> Node | None:
        return self.nodes.get(path)

    def apply(self, update: TreeUpdate) -> None:
        for path in update.deletes:
            del self.nodes[path]
        self.nodes.update(update.writes)
