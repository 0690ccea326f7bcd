"""The app hash: a history-independent 16-ary sparse Merkle tree over sha256(key).

The tree is Jellyfish-style (Diem's JMT): a key's *path* is the 64 nibbles of sha256(key), high nibble of
each byte first. A subtree that holds a single leaf is replaced by that leaf, so every leaf sits at the
shortest prefix of its path that no other key shares, and an internal node exists exactly where two or more
keys share a prefix. The root is therefore a function of the set of (key, value) pairs only: the order of
inserts and deletes, and anything deleted on the way, leave no trace.

This module is pure. Everything a client needs to recompute a root is written here:

Hashing (H = SHA-256, `||` = concatenation)::

    key_hash   = H(key)                               32 bytes = 64 nibbles: nibble i is the high half
                                                      of byte i // 2 for even i, its low half for odd i
    value_hash = H(value)
    EMPTY_HASH = 32 zero bytes                        the placeholder for an empty subtree
    leaf hash     = H(0x00 || key_hash || value_hash)
    internal hash = H(0x01 || child_0 || child_1 || ... || child_15)   (EMPTY_HASH for an empty slot)

    subtree(S, d), for a set S of leaves sharing their first d nibbles:
        |S| = 0  ->  EMPTY_HASH
        |S| = 1  ->  the leaf hash of its one member
        else     ->  internal hash of subtree({x in S : nibble d of x.key_hash == i}, d + 1) for i = 0..15
    root = subtree(all leaves, 0); the empty tree's root is EMPTY_ROOT = EMPTY_HASH.

Query proofs are in the ICS23 shape: `ics23_proofs.py` maps this tree's leaf and internal hashes to ICS23's
LeafOp and InnerOp and makes existence and non-existence proofs from the stored nodes.

`MemoryTree` is the readable reference implementation: it rebuilds the tree from scratch for every root. The store's incremental tree (`sparse_merkle_nodes.py`) is tested against it.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

HASH_LENGTH = 32
MAX_DEPTH = 2 * HASH_LENGTH
"""A path has 64 nibbles; two distinct key hashes differ within them, so no node is deeper."""

EMPTY_HASH = bytes(HASH_LENGTH)
"""Placeholder hash of an empty subtree (no SHA-256 output is known to be all zeros)."""

EMPTY_ROOT = EMPTY_HASH
"""The root (app hash) of a tree with no keys."""

LEAF_PREFIX = b"\x00"
INTERNAL_PREFIX = b"\x01"


def key_hash(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def value_hash(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def leaf_hash(key_hash_: bytes, value_hash_: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + key_hash_ + value_hash_).digest()


def internal_hash(children: Iterable[bytes]) -> bytes:
    """Hash of an internal node from its 16 child hashes (EMPTY_HASH for empty slots)."""
    children = list(children)
    if len(children) != 16:
        raise ValueError("an internal node has exactly 16 child slots")
    return hashlib.sha256(INTERNAL_PREFIX + b"".join(children)).digest()


def nibble(hash_: bytes, index: int) -> int:
    """Nibble `index` (0..63) of a 32-byte hash, high nibble of each byte first."""
    byte = hash_[index >> 1]
    return byte >> 4 if index % 2 == 0 else byte & 0x0F


# -- the reference tree ---------------------------------------------------------------------------------------


class MemoryTree:
    """The readable reference: a dict of key -> value, with the root rebuilt from scratch each time.

    Slow (every call walks every key) and obviously right; the incremental store tree is tested against it.
    """

    def __init__(self, items: dict[bytes, bytes] | None = None) -> None:
        self.items: dict[bytes, bytes] = dict(items or {})

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self.items.pop(key, None)
            else:
                self.items[key] = value

    def _leaves(self) -> list[tuple[bytes, bytes]]:
        return sorted((key_hash(k), value_hash(v)) for k, v in self.items.items())

    def root(self) -> bytes:
        return subtree_hash(self._leaves(), 0)


def group_by_nibble(leaves: list[tuple[bytes, bytes]], depth: int) -> list[list[tuple[bytes, bytes]]]:
    groups: list[list[tuple[bytes, bytes]]] = [[] for _ in range(16)]
    for leaf in leaves:
        groups[nibble(leaf[0], depth)].append(leaf)
    return groups


def subtree_hash(leaves: list[tuple[bytes, bytes]], depth: int) -> bytes:
    """subtree(S, d) of the module docstring, for leaves given as (key_hash, value_hash)."""
    if not leaves:
        return EMPTY_HASH
    if len(leaves) == 1:
        return leaf_hash(*leaves[0])
    return internal_hash(subtree_hash(group, depth + 1) for group in group_by_nibble(leaves, depth))
