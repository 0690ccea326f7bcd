"""The binary Merkle tree over a round's checkpoint hashes (docs/protocol.md section 2).

leaf = sha256(0x00 || checkpoint_hash), node = sha256(0x01 || left || right); an odd last node of a level is
carried up unchanged. The domain bytes keep a leaf from ever being read as a node. A proof for leaf i is the
list of sibling hashes from the bottom up, each tagged with its side; carried-up levels contribute nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib

from .errors import MerkleError


def leaf_hash(checkpoint_hash: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + checkpoint_hash).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _check_hashes(hashes: list[bytes]) -> None:
    if not hashes:
        raise MerkleError("a Merkle tree needs at least one leaf")
    for value in hashes:
        if not isinstance(value, (bytes, bytearray)) or len(value) != 32:
            raise MerkleError("every leaf must be a 32-byte hash")


def merkle_root(checkpoint_hashes: list[bytes]) -> bytes:
    """Root over the checkpoint hashes, in checkpoint order."""
    _check_hashes(checkpoint_hashes)
    level = [leaf_hash(bytes(h)) for h in checkpoint_hashes]
    while len(level) > 1:
        parents = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            parents.append(level[-1])
        level = parents
    return level[0]


@dataclasses.dataclass(frozen=True)
class ProofStep:
    sibling: bytes
    sibling_is_left: bool


def merkle_proof(checkpoint_hashes: list[bytes], index: int) -> list[ProofStep]:
    """Sibling path proving that checkpoint `index` is in the tree."""
    _check_hashes(checkpoint_hashes)
    if not 0 <= index < len(checkpoint_hashes):
        raise MerkleError(f"leaf index {index} outside [0, {len(checkpoint_hashes)})")
    level = [leaf_hash(bytes(h)) for h in checkpoint_hashes]
    proof: list[ProofStep] = []
    while len(level) > 1:
        if index % 2 == 1:
            proof.append(ProofStep(level[index - 1], True))
        elif index + 1 < len(level):
            proof.append(ProofStep(level[index + 1], False))
        parents = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            parents.append(level[-1])
        level = parents
        index //= 2
    return proof


def verify_proof(root: bytes, checkpoint_hash: bytes, index: int, leaf_count: int, proof: list[ProofStep]) -> bool:
    """True when `proof` shows `checkpoint_hash` at position `index` of a tree of `leaf_count` leaves with
    this root. The shape of the path is recomputed from (index, leaf_count), so a proof cannot claim a
    different position."""
    if not 0 <= index < leaf_count:
        return False
    current = leaf_hash(checkpoint_hash)
    steps = iter(proof)
    width = leaf_count
    position = index
    while width > 1:
        has_sibling = position % 2 == 1 or position + 1 < width
        if has_sibling:
            step = next(steps, None)
            if step is None or step.sibling_is_left != (position % 2 == 1) or len(step.sibling) != 32:
                return False
            current = node_hash(step.sibling, current) if step.sibling_is_left else node_hash(current, step.sibling)
        position //= 2
        width = (width + 1) // 2
    return next(steps, None) is None and current == root
