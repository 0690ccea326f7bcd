"""A node's proven answer built in process, and the wallet's check of it: the proof tests' shared steps.

`node_answer` is what an honest node answers at a path over a state's items (the answer, an ICS23 proof of every
key the answer read, the root); `accepted` is the wallet's check of it (`wallet.proofs`); `with_value` forges an
existence proof's value, as a node that tampers with a record would.
"""

from __future__ import annotations

from trolly.chain.app import query
from trolly.chain.ics23_proofs import prove_key
from trolly.chain.proto import ics23_pb2 as ics23
from trolly.chain.query_reads import RecordingReader
from trolly.chain.sparse_merkle import key_hash, value_hash
from trolly.chain.sparse_merkle_nodes import DictNodeSource, root_hash, update_tree
from trolly.chain.state import MemoryKV, State
from trolly.wallet.proofs import check_answer, proven_values
from trolly.wallet.rpc_types import ProofOp


def node_answer(items: dict[bytes, bytes], path: str) -> tuple[object, list[ProofOp], bytes]:
    """What an honest node answers at `path` over `items`: the answer, a proof of every key it read, the root."""
    source = DictNodeSource()
    source.apply(update_tree(source, [(key_hash(k), value_hash(v)) for k, v in items.items()]))
    recorder = RecordingReader(MemoryKV(items))
    answer = query(State(recorder), path).value
    reads = recorder.reads()
    assert reads.unindexed == (), f"{path} lists a prefix no index covers"
    ops = [ProofOp(*_proof(source, key, items.get(key))) for key in reads.keys]
    return answer, ops, root_hash(source)


def _proof(source, key: bytes, value: bytes | None) -> tuple[str, bytes, bytes]:
    proof_type, proof = prove_key(source, key, value)
    return proof_type, key, proof


def accepted(path: str, answer, ops: list[ProofOp], root: bytes) -> tuple[str, ...]:
    return check_answer(path, answer, proven_values(root, ops))


def with_value(op: ProofOp, value: bytes) -> ProofOp:
    """The same existence proof claiming another value: what a node that tampers with a record sends."""
    proof = ics23.CommitmentProof.FromString(op.data)
    proof.exist.value = value
    return ProofOp(op.type, op.key, proof.SerializeToString())
