"""The app hash: a history-independent 16-ary sparse Merkle tree over sha256(key), and its proofs.

The tree is Jellyfish-style (Diem's JMT): a key's *path* is the 64 nibbles of sha256(key), high nibble of
each byte first. A subtree that holds a single leaf is replaced by that leaf, so every leaf sits at the
shortest prefix of its path that no other key shares, and an internal node exists exactly where two or more
keys share a prefix. The root is therefore a function of the set of (key, value) pairs only: the order of
inserts and deletes, and anything deleted on the way, leave no trace.

This module is pure (it is imported by the wallet to check proofs). Everything a client needs to re-implement
verification is written here:

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

Proof bytes (membership and non-membership share one format)::

    proof    = 0x01 (format version) || depth (1 byte, 0..64) || level_0 || ... || level_{depth-1} || terminal
               `depth` counts the internal nodes on the key's path, from the root (level_0) down.
    level_i  = bitmap (2 bytes, big-endian) || sibling hashes
               The internal node at depth i on the key's path has 16 slots. Bit j (value 1 << j) is set when
               slot j is non-empty and j is not the key's own nibble i; the hashes of those slots follow in
               ascending j. The key's own slot is never in the bitmap (its hash is what the verifier computes).
    terminal = 0x00                                   the key's slot at depth `depth` is empty
             | 0x01 || key_hash' || value_hash'       a leaf occupies the key's slot at depth `depth`
               (with depth 0 the terminal is the root itself: the empty tree, or a tree of one leaf)

Verification of (root, key, value, proof): parse exactly (no trailing bytes); start from the terminal's hash
(EMPTY_HASH, or the leaf hash of key_hash' and value_hash'); for i = depth-1 down to 0 put it in slot
nibble_i(H(key)), fill the bitmap's slots with the listed hashes and EMPTY_HASH elsewhere, and take the
internal hash. The result must equal `root`. Moreover:

- membership (value given): the terminal is a leaf with key_hash' = H(key) and value_hash' = H(value);
- non-membership (value None): the terminal is empty, or a leaf with key_hash' != H(key) whose first
  `depth` nibbles equal those of H(key) (a different key occupies the path, so the key cannot be in the tree).

`MemoryTree` is the readable reference implementation: it rebuilds the tree from scratch for every root and
proof. The store's incremental tree (`sparse_merkle_nodes.py`) is tested against it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

PROOF_OP_TYPE = "trolly:smt"
"""The `ProofOp.type` of an ABCI Query proof made by this tree."""

HASH_LENGTH = 32
MAX_DEPTH = 2 * HASH_LENGTH
"""A path has 64 nibbles; two distinct key hashes differ within them, so no node is deeper."""

EMPTY_HASH = bytes(HASH_LENGTH)
"""Placeholder hash of an empty subtree (no SHA-256 output is known to be all zeros)."""

EMPTY_ROOT = EMPTY_HASH
"""The root (app hash) of a tree with no keys."""

LEAF_PREFIX = b"\x00"
INTERNAL_PREFIX = b"\x01"
PROOF_VERSION = 1
TERMINAL_EMPTY = 0
TERMINAL_LEAF = 1


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


# -- proofs ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proof:
    """A decoded proof: the sibling hashes of each level on the path (16 slots, None where empty or the key's
    own slot) and the terminal: None for an empty slot, or the (key_hash, value_hash) of the leaf found there."""

    levels: tuple[tuple[bytes | None, ...], ...]
    terminal: tuple[bytes, bytes] | None

    @property
    def depth(self) -> int:
        return len(self.levels)


class ProofFormatError(ValueError):
    """Proof bytes that do not parse."""


def encode_proof(proof: Proof) -> bytes:
    out = bytearray([PROOF_VERSION, proof.depth])
    for siblings in proof.levels:
        bitmap = 0
        hashes = []
        for slot, sibling in enumerate(siblings):
            if sibling is not None:
                bitmap |= 1 << slot
                hashes.append(sibling)
        out += bitmap.to_bytes(2, "big")
        out += b"".join(hashes)
    if proof.terminal is None:
        out.append(TERMINAL_EMPTY)
    else:
        out.append(TERMINAL_LEAF)
        out += proof.terminal[0] + proof.terminal[1]
    return bytes(out)


def decode_proof(data: bytes) -> Proof:
    """Parse proof bytes exactly; raises ProofFormatError on any defect, trailing bytes included."""
    if len(data) < 3 or data[0] != PROOF_VERSION:
        raise ProofFormatError("not a version-1 trolly:smt proof")
    depth = data[1]
    if depth > MAX_DEPTH:
        raise ProofFormatError(f"depth {depth} exceeds {MAX_DEPTH}")
    position = 2
    levels = []
    for _ in range(depth):
        if position + 2 > len(data):
            raise ProofFormatError("proof ends inside a level")
        bitmap = int.from_bytes(data[position:position + 2], "big")
        position += 2
        siblings: list[bytes | None] = [None] * 16
        for slot in range(16):
            if bitmap >> slot & 1:
                if position + HASH_LENGTH > len(data):
                    raise ProofFormatError("proof ends inside a sibling hash")
                siblings[slot] = bytes(data[position:position + HASH_LENGTH])
                position += HASH_LENGTH
        levels.append(tuple(siblings))
    if position >= len(data):
        raise ProofFormatError("proof has no terminal")
    kind = data[position]
    position += 1
    terminal = None
    if kind == TERMINAL_LEAF:
        if position + 2 * HASH_LENGTH > len(data):
            raise ProofFormatError("proof ends inside the terminal leaf")
        terminal = (bytes(data[position:position + HASH_LENGTH]), bytes(data[position + HASH_LENGTH:position + 2 * HASH_LENGTH]))
        position += 2 * HASH_LENGTH
    elif kind != TERMINAL_EMPTY:
        raise ProofFormatError(f"unknown terminal kind {kind}")
    if position != len(data):
        raise ProofFormatError(f"{len(data) - position} trailing bytes after the proof")
    return Proof(tuple(levels), terminal)


def verify_proof(root: bytes, key: bytes, value: bytes | None, proof: bytes) -> bool:
    """True when `proof` shows that `key` maps to `value` under `root` (value None: that `key` is absent).

    Never raises on malformed input: anything that is not a valid proof for exactly these arguments is False.
    """
    if not isinstance(root, (bytes, bytearray)) or len(root) != HASH_LENGTH:
        return False
    if not isinstance(key, (bytes, bytearray)) or not (value is None or isinstance(value, (bytes, bytearray))):
        return False
    try:
        decoded = decode_proof(bytes(proof))
    except (ProofFormatError, TypeError):
        return False
    path_hash = key_hash(key)
    if value is None:
        if decoded.terminal is not None:
            other_key_hash = decoded.terminal[0]
            if other_key_hash == path_hash:
                return False
            if any(nibble(other_key_hash, i) != nibble(path_hash, i) for i in range(decoded.depth)):
                return False
    else:
        if decoded.terminal is None or decoded.terminal != (path_hash, value_hash(value)):
            return False
    current = EMPTY_HASH if decoded.terminal is None else leaf_hash(*decoded.terminal)
    for depth in range(decoded.depth - 1, -1, -1):
        own_slot = nibble(path_hash, depth)
        siblings = decoded.levels[depth]
        if siblings[own_slot] is not None:
            return False  # the key's own slot is computed, never supplied
        children = [EMPTY_HASH if s is None else s for s in siblings]
        children[own_slot] = current
        current = internal_hash(children)
    return current == bytes(root)


# -- the reference tree ---------------------------------------------------------------------------------------


class MemoryTree:
    """The readable reference: a dict of key -> value, with the root and proofs rebuilt from scratch each time.

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

    def prove(self, key: bytes) -> tuple[bytes | None, bytes]:
        """(value or None, proof bytes) for `key`, membership or non-membership."""
        path_hash = key_hash(key)
        leaves = self._leaves()
        levels = []
        depth = 0
        while len(leaves) > 1:
            own_slot = nibble(path_hash, depth)
            groups = group_by_nibble(leaves, depth)
            levels.append(tuple(
                None if slot == own_slot or not groups[slot] else subtree_hash(groups[slot], depth + 1)
                for slot in range(16)
            ))
            leaves = groups[own_slot]
            depth += 1
        terminal = leaves[0] if leaves else None
        return self.items.get(key), encode_proof(Proof(tuple(levels), terminal))


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
