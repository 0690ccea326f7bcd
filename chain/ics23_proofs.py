"""Query proofs in the ICS23 shape (cosmos/ics23): what any ICS23 verifier checks against the app hash.

The tree of `sparse_merkle.py` maps to ICS23 without a conversion step, because a stored node *is* its hash
preimage (`sparse_merkle_nodes.py`):

- a leaf is `H(0x00 || H(key) || H(value))`: the ICS23 LeafOp {hash SHA256, prehash_key SHA256, prehash_value
  SHA256, length NO_PREFIX, prefix 0x00};
- an internal node is `H(0x01 || child_0 || ... || child_15)`: seen from its child in slot s, the InnerOp
  {hash SHA256, prefix = 0x01 || child_0 .. child_{s-1}, suffix = child_{s+1} .. child_15}, so the InnerSpec is
  child_order 0..15, child_size 32, min and max prefix length 1 (the 0x01), empty_child 32 zero bytes.

Two specs describe the same tree and hashes, differing only in what a proof calls the key and the value:

- `TROLLY_SPEC`, for existence: the key is the state key and the value the stored value, both raw (the leaf op
  hashes them). A query answer's membership proof (`EXIST_OP_TYPE`) carries the stored value, so a client
  that knows the record's layout (docs/protocol.md) reads the proven fields out of the proof itself.
- `TROLLY_HASHED_SPEC`, for non-existence: the key is `sha256(state key)` and the value `sha256(stored value)`
  (prehash NO_HASH: they are hashed already). Leaves sit in the order of their key hashes, and the tree keeps
  only the hashes, so a neighbour can only be named by its hashes: a non-existence proof (`NONEXIST_OP_TYPE`)
  is made under this spec for the key `sha256(state key)`, which ICS23 compares byte by byte, as every
  verifier does (`prehash_key_before_comparison` is newer than @confio/ics23 0.6.8).

A non-existence proof holds the existence proofs of the key's two neighbours in key-hash order (or one, at an
end). Stock ICS23 verifiers require the two to sit in *adjacent* slots where their paths part, and every
other step of their paths to be right-most (left neighbour) or left-most (right neighbour), skipping empty
children only in newer versions. In a 16-ary sparse tree, empty slots often lie between neighbours, so stock
verifiers check only some non-existence proofs; `trolly.wallet.ics23` accepts the others too, by checking
that every slot between the neighbours (and beside their paths) is `empty_child`. Existence proofs are
checked by every ICS23 verifier. Pure: the caller passes the tree as a `sparse_merkle_nodes.NodeSource`.
"""

from __future__ import annotations

from .proto import ics23_pb2 as ics23
from .sparse_merkle import EMPTY_HASH, HASH_LENGTH, INTERNAL_PREFIX, LEAF_PREFIX, MAX_DEPTH, key_hash, value_hash
from .sparse_merkle_nodes import NodeSource, child_hash

EXIST_OP_TYPE = "ics23:trolly"
"""`ProofOp.type` of a membership proof: a CommitmentProof holding an ExistenceProof under `TROLLY_SPEC`."""
NONEXIST_OP_TYPE = "ics23:trolly-hashed"
"""`ProofOp.type` of a non-membership proof: a CommitmentProof holding a NonExistenceProof under
`TROLLY_HASHED_SPEC`, for the key `sha256(state key)`."""

SLOTS = 16


def _inner_spec() -> ics23.InnerSpec:
    return ics23.InnerSpec(child_order=list(range(SLOTS)), child_size=HASH_LENGTH, min_prefix_length=1,
                           max_prefix_length=1, empty_child=EMPTY_HASH, hash=ics23.SHA256)


LEAF_OP = ics23.LeafOp(hash=ics23.SHA256, prehash_key=ics23.SHA256, prehash_value=ics23.SHA256,
                       length=ics23.NO_PREFIX, prefix=LEAF_PREFIX)
HASHED_LEAF_OP = ics23.LeafOp(hash=ics23.SHA256, prehash_key=ics23.NO_HASH, prehash_value=ics23.NO_HASH,
                              length=ics23.NO_PREFIX, prefix=LEAF_PREFIX)

TROLLY_SPEC = ics23.ProofSpec(leaf_spec=LEAF_OP, inner_spec=_inner_spec(), max_depth=MAX_DEPTH, min_depth=0,
                              prehash_key_before_comparison=True)
"""Existence proofs: raw state key and stored value."""
TROLLY_HASHED_SPEC = ics23.ProofSpec(leaf_spec=HASHED_LEAF_OP, inner_spec=_inner_spec(), max_depth=MAX_DEPTH,
                                     min_depth=0, prehash_key_before_comparison=False)
"""Non-existence proofs: the key is sha256(state key), a leaf's value sha256(stored value)."""

_HEX = "0123456789abcdef"


class ProofUnavailable(ValueError):
    """The tree does not hold what the proof must show (the store and its tree disagree, or a node is missing)."""


def inner_op(record: bytes, slot: int) -> ics23.InnerOp:
    """The ICS23 step from the child in `slot` of an internal node record up to the node's hash."""
    start = 1 + HASH_LENGTH * slot
    return ics23.InnerOp(hash=ics23.SHA256, prefix=record[:start], suffix=record[start + HASH_LENGTH:])


def _node(source: NodeSource, path: str) -> bytes:
    record = source.get_node(path)
    if record is None:
        raise ProofUnavailable(f"the tree is missing the node at path {path!r}")
    return record


def _walk(source: NodeSource, hash_hex: str) -> tuple[list[tuple[str, bytes]], tuple[str, bytes] | None]:
    """The internal nodes on the path of a key hash, root first, and the leaf that ends it (None: the path
    ends in an empty slot, or the tree is empty)."""
    internals: list[tuple[str, bytes]] = []
    path = ""
    record = source.get_node(path)
    while record is not None and record[0] == INTERNAL_PREFIX[0]:
        internals.append((path, record))
        if child_hash(record, int(hash_hex[len(path)], 16)) == EMPTY_HASH:
            return internals, None
        path += hash_hex[len(path)]
        record = _node(source, path)
    return internals, None if record is None else (path, record)


def _path_ops(source: NodeSource, leaf_path: str) -> list[ics23.InnerOp]:
    """The inner ops of the leaf at `leaf_path`, from the leaf up to the root (ICS23's order)."""
    return [inner_op(_node(source, leaf_path[:depth]), int(leaf_path[depth], 16))
            for depth in range(len(leaf_path) - 1, -1, -1)]


def _extreme_leaf(source: NodeSource, path: str, rightmost: bool) -> tuple[str, bytes]:
    """The last (or first) leaf in key-hash order below the node at `path`."""
    record = _node(source, path)
    slots = range(SLOTS - 1, -1, -1) if rightmost else range(SLOTS)
    while record[0] == INTERNAL_PREFIX[0]:
        slot = next(s for s in slots if child_hash(record, s) != EMPTY_HASH)
        path += _HEX[slot]
        record = _node(source, path)
    return path, record


def _neighbour(source: NodeSource, internals: list[tuple[str, bytes]], terminal: tuple[str, bytes] | None,
               hash_hex: str, left: bool) -> tuple[str, bytes] | None:
    """The leaf just before (left) or after the key hash in key-hash order, or None at that end of the tree."""
    if terminal is not None and (terminal[1][1:33].hex() < hash_hex) == left:
        return terminal
    for path, record in reversed(internals):
        own = int(hash_hex[len(path)], 16)
        others = range(own - 1, -1, -1) if left else range(own + 1, SLOTS)
        for slot in others:
            if child_hash(record, slot) != EMPTY_HASH:
                return _extreme_leaf(source, path + _HEX[slot], rightmost=left)
    return None


def _hashed_existence(source: NodeSource, leaf: tuple[str, bytes] | None) -> ics23.ExistenceProof | None:
    if leaf is None:
        return None
    path, record = leaf
    return ics23.ExistenceProof(key=record[1:33], value=record[33:65], leaf=HASHED_LEAF_OP,
                                path=_path_ops(source, path))


def prove_key(source: NodeSource, key: bytes, value: bytes | None) -> tuple[str, bytes]:
    """(ProofOp type, CommitmentProof bytes) for `key` holding `value` (None: absent) in the tree of `source`.

    `value` is what the store holds for `key`; ProofUnavailable when the tree says otherwise.
    """
    hashed = key_hash(key)
    internals, terminal = _walk(source, hashed.hex())
    if value is not None:
        if terminal is None or terminal[1] != LEAF_PREFIX + hashed + value_hash(value):
            raise ProofUnavailable("the tree does not hold this key with this value")
        exist = ics23.ExistenceProof(key=key, value=value, leaf=LEAF_OP, path=_path_ops(source, terminal[0]))
        return EXIST_OP_TYPE, ics23.CommitmentProof(exist=exist).SerializeToString()
    if terminal is not None and terminal[1][1:33] == hashed:
        raise ProofUnavailable("the tree holds this key, the store does not")
    nonexist = ics23.NonExistenceProof(key=hashed)
    left = _hashed_existence(source, _neighbour(source, internals, terminal, hashed.hex(), left=True))
    right = _hashed_existence(source, _neighbour(source, internals, terminal, hashed.hex(), left=False))
    if left is not None:
        nonexist.left.CopyFrom(left)
    if right is not None:
        nonexist.right.CopyFrom(right)
    return NONEXIST_OP_TYPE, ics23.CommitmentProof(nonexist=nonexist).SerializeToString()
