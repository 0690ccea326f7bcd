"""An ICS23 verifier for Trolly's proof specs: the checks of cosmos/ics23's `VerifyMembership` and
`VerifyNonMembership`, written from the spec so that the wallet trusts no node's word.

The specs themselves are `trolly.chain.ics23_proofs.TROLLY_SPEC` and `TROLLY_HASHED_SPEC` (docs/protocol.md
writes them out). Every check raises `ProofInvalid` naming what failed; nothing here returns a bare False.

Where this is stricter than stock ICS23: a leaf op must equal the spec's exactly, and an inner op must sit at
exactly one child position (its prefix `min_prefix_length + 32 i` bytes and its suffix `32 (15 - i)`), as
every Trolly proof does. Where it accepts more: two neighbours of a non-existence proof may have empty slots
between them where their paths part (stock verifiers require adjacent slots), each of those slots checked
to be `empty_child`, in the same way stock verifiers skip empty slots beside a left- or right-most path. That
is what lets a non-existence proof in a 16-ary sparse tree hold whatever the neighbours' slots are. And a
non-existence proof with no neighbour at all holds against the empty tree's root (`empty_child`) only.
"""

from __future__ import annotations

import hashlib

from google.protobuf.message import DecodeError

from trolly.chain.proto import ics23_pb2 as ics23

from .errors import ProofInvalid

_PREHASH = {ics23.NO_HASH: lambda data: data, ics23.SHA256: lambda data: hashlib.sha256(data).digest()}


def decode_commitment_proof(data: bytes) -> ics23.CommitmentProof:
    """A CommitmentProof from its protobuf bytes; ProofInvalid if they do not parse."""
    proof = ics23.CommitmentProof()
    try:
        proof.ParseFromString(bytes(data))
    except (DecodeError, TypeError) as exc:
        raise ProofInvalid(f"the proof is not an ICS23 CommitmentProof ({exc})") from None
    return proof


def _prehash(op: int, data: bytes) -> bytes:
    if op not in _PREHASH:
        raise ProofInvalid(f"hash op {op} is not one Trolly's specs use")
    return _PREHASH[op](data)


def _sha256(op: int, data: bytes) -> bytes:
    if op != ics23.SHA256:
        raise ProofInvalid(f"hash op {op} where the spec says SHA256")
    return hashlib.sha256(data).digest()


def apply_leaf(leaf: ics23.LeafOp, key: bytes, value: bytes) -> bytes:
    if leaf.length != ics23.NO_PREFIX:
        raise ProofInvalid("length op other than NO_PREFIX")
    return _sha256(leaf.hash, leaf.prefix + _prehash(leaf.prehash_key, key) + _prehash(leaf.prehash_value, value))


def apply_inner(op: ics23.InnerOp, child: bytes) -> bytes:
    return _sha256(op.hash, op.prefix + child + op.suffix)


def child_position(spec: ics23.InnerSpec, op: ics23.InnerOp) -> int:
    """The child slot an inner op puts its input in, from its padding; ProofInvalid when it fits none."""
    slots = len(spec.child_order)
    for position in range(slots):
        prefix = position * spec.child_size
        if (prefix + spec.min_prefix_length <= len(op.prefix) <= prefix + spec.max_prefix_length
                and len(op.suffix) == (slots - 1 - position) * spec.child_size):
            return spec.child_order[position]
    raise ProofInvalid("an inner step fits no child position of the spec")


def check_against_spec(exist: ics23.ExistenceProof, spec: ics23.ProofSpec) -> None:
    """The existence proof's leaf and inner ops are the ones `spec` allows."""
    if exist.leaf != spec.leaf_spec:
        raise ProofInvalid("the proof's leaf op is not the spec's")
    if not spec.min_depth <= len(exist.path) <= (spec.max_depth or len(exist.path)):
        raise ProofInvalid(f"the proof has {len(exist.path)} inner steps, outside the spec's depth")
    for op in exist.path:
        if op.hash != spec.inner_spec.hash:
            raise ProofInvalid("an inner step's hash op is not the spec's")
        if op.prefix.startswith(spec.leaf_spec.prefix):
            raise ProofInvalid("an inner step's prefix starts with the leaf prefix")
        child_position(spec.inner_spec, op)


def existence_root(exist: ics23.ExistenceProof) -> bytes:
    """The root an existence proof leads to from its key and value."""
    if not exist.key or not exist.HasField("leaf"):
        raise ProofInvalid("an existence proof needs a key and a leaf op")
    current = apply_leaf(exist.leaf, exist.key, exist.value)
    for op in exist.path:
        current = apply_inner(op, current)
    return current


def verify_existence(exist: ics23.ExistenceProof, spec: ics23.ProofSpec, root: bytes, key: bytes,
                     value: bytes) -> None:
    """`key` holds `value` under `root`, as the existence proof shows under `spec`."""
    check_against_spec(exist, spec)
    if existence_root(exist) != root:
        raise ProofInvalid("the proof does not lead to the app hash")
    if exist.key != key:
        raise ProofInvalid("the proof is for another key")
    if exist.value != value:
        raise ProofInvalid("the proof is for another value")


def _compared(spec: ics23.ProofSpec, key: bytes) -> bytes:
    return _prehash(spec.leaf_spec.prehash_key, key) if spec.prehash_key_before_comparison else key


def _empty(spec: ics23.InnerSpec, data: bytes, index: int) -> bool:
    return data[index * spec.child_size:(index + 1) * spec.child_size] == spec.empty_child


def _slots_left_empty(spec: ics23.InnerSpec, op: ics23.InnerOp, position: int) -> bool:
    """Every child before `position` in this step's prefix is the empty child."""
    start = len(op.prefix) - position * spec.child_size
    return all(_empty(spec, op.prefix[start:], index) for index in range(position))


def _slots_right_empty(spec: ics23.InnerSpec, op: ics23.InnerOp, count: int) -> bool:
    """The first `count` children of this step's suffix are the empty child."""
    return all(_empty(spec, op.suffix, index) for index in range(count))


def is_left_most(spec: ics23.InnerSpec, path: list) -> bool:
    """No leaf lies left of this path: at every step, every slot before the path's is empty."""
    return all(_slots_left_empty(spec, op, list(spec.child_order).index(child_position(spec, op))) for op in path)


def is_right_most(spec: ics23.InnerSpec, path: list) -> bool:
    last = len(spec.child_order) - 1
    return all(_slots_right_empty(spec, op, last - list(spec.child_order).index(child_position(spec, op)))
               for op in path)


def is_left_neighbour(spec: ics23.InnerSpec, left: list, right: list) -> bool:
    """No leaf lies between the leaves of two paths (given leaf first): below the node where they part, the left
    path is right-most and the right path left-most, and every slot between them at that node is empty."""
    left, right = list(left), list(right)
    while left and right and left[-1] == right[-1]:
        left.pop()
        right.pop()
    if not left or not right:
        return False
    top_left, top_right = left.pop(), right.pop()
    left_at = list(spec.child_order).index(child_position(spec, top_left))
    right_at = list(spec.child_order).index(child_position(spec, top_right))
    if right_at <= left_at or not _slots_right_empty(spec, top_left, right_at - left_at - 1):
        return False
    return is_right_most(spec, left) and is_left_most(spec, right)


def verify_non_existence(nonexist: ics23.NonExistenceProof, spec: ics23.ProofSpec, root: bytes, key: bytes) -> None:
    """`key` is absent under `root`, as the neighbours in the non-existence proof show under `spec`."""
    has_left, has_right = nonexist.HasField("left"), nonexist.HasField("right")
    if not has_left and not has_right:
        if root == spec.inner_spec.empty_child:
            return  # the empty tree (whose root is the empty child) holds no key
        raise ProofInvalid("a non-existence proof with neither neighbour")
    if has_left:
        verify_existence(nonexist.left, spec, root, nonexist.left.key, nonexist.left.value)
        if not _compared(spec, nonexist.left.key) < _compared(spec, key):
            raise ProofInvalid("the left neighbour is not before the key")
    if has_right:
        verify_existence(nonexist.right, spec, root, nonexist.right.key, nonexist.right.value)
        if not _compared(spec, key) < _compared(spec, nonexist.right.key):
            raise ProofInvalid("the right neighbour is not after the key")
    inner = spec.inner_spec
    if not has_left:
        adjacent = is_left_most(inner, list(nonexist.right.path))
    elif not has_right:
        adjacent = is_right_most(inner, list(nonexist.left.path))
    else:
        adjacent = is_left_neighbour(inner, list(nonexist.left.path), list(nonexist.right.path))
    if not adjacent:
        raise ProofInvalid("the neighbours in the non-existence proof are not next to each other")


def verify_membership(proof: ics23.CommitmentProof, spec: ics23.ProofSpec, root: bytes, key: bytes,
                      value: bytes) -> None:
    if proof.WhichOneof("proof") != "exist":
        raise ProofInvalid("expected an existence proof")
    verify_existence(proof.exist, spec, root, key, value)


def verify_non_membership(proof: ics23.CommitmentProof, spec: ics23.ProofSpec, root: bytes, key: bytes) -> None:
    if proof.WhichOneof("proof") != "nonexist":
        raise ProofInvalid("expected a non-existence proof")
    verify_non_existence(proof.nonexist, spec, root, key)
