"""Checking a query answer against the chain's app hash, instead of trusting the node's word.

A query at height H answers from the state after block H. That state's Merkle root (the app hash) is only
written into the header of the NEXT block, H + 1 (CometBFT headers carry the app hash of the previous
block's result). So `prove_answer` asks with `prove=true`, waits for block H + 1, takes `header.app_hash`,
and checks the answer's ICS23 proof (`trolly.chain.ics23_proofs` makes it, `trolly.wallet.ics23` verifies it):

- the proof must be for the state key the wallet itself derives from the query path (`proven_records`), so a
  node cannot answer one account's question with another's proof;
- an existence proof (`ics23:trolly`) proves the stored record; a non-existence proof (`ics23:trolly-hashed`)
  proves the key absent;
- the fields the answer shows that come from that record must be the record's (`proven_records`): a node
  that tampers with a balance, a stake or a task's status is caught even with a valid proof of the true record.

Fields of an answer that come from other keys (a task's members, a worker's unbonding entries) are not
covered; `ProvenAnswer.fields` names the ones that are. What this does not do: check the header's commit
signatures (that is a light client's job). Against a single node it shows that the answer is consistent with
the app hash that node put in its chain.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from trolly.chain.ics23_proofs import EXIST_OP_TYPE, NONEXIST_OP_TYPE, TROLLY_HASHED_SPEC, TROLLY_SPEC

from .errors import ProofInvalid, QueryFailed
from .ics23 import decode_commitment_proof, verify_membership, verify_non_membership
from .proven_records import Expectation, expectation_for
from .rpc import AsyncRpcClient


@dataclass(frozen=True)
class ProvenAnswer:
    """A query's JSON answer whose record was checked against the app hash of block `header_height`."""

    path: str
    answer: Any
    height: int
    """The state the answer comes from: after block `height`."""
    header_height: int
    """The block whose header's app hash the proof was checked against (`height + 1`)."""
    app_hash: bytes
    present: bool
    """False when the proof shows the key absent (an account never funded)."""
    fields: tuple[str, ...]
    """The answer's fields that the proof covers."""

    def proof_json(self) -> dict:
        return {"verified": True, "note": self.note(), "query_height": self.height,
                "header_height": self.header_height, "app_hash": self.app_hash.hex().upper(),
                "present": self.present, "fields": list(self.fields)}

    def note(self) -> str:
        return f"proved at height {self.height}"


def check_proof(app_hash: bytes, key: bytes, value: bytes | None, proof_type: str, proof: bytes) -> None:
    """`key` holds `value` (None: is absent) under `app_hash`, as the ICS23 proof shows; ProofInvalid if not."""
    commitment = decode_commitment_proof(proof)
    if value is not None:
        if proof_type != EXIST_OP_TYPE:
            raise ProofInvalid(f"a value needs an {EXIST_OP_TYPE} proof, the node sent {proof_type!r}")
        verify_membership(commitment, TROLLY_SPEC, app_hash, key, value)
    else:
        if proof_type != NONEXIST_OP_TYPE:
            raise ProofInvalid(f"an absent key needs a {NONEXIST_OP_TYPE} proof, the node sent {proof_type!r}")
        verify_non_membership(commitment, TROLLY_HASHED_SPEC, app_hash, hashlib.sha256(key).digest())


def proof_holds(app_hash: bytes, key: bytes, value: bytes | None, proof_type: str, proof: bytes) -> bool:
    try:
        check_proof(app_hash, key, value, proof_type, proof)
    except ProofInvalid:
        return False
    return True


def proven_record(proof_type: str, proof: bytes) -> bytes | None:
    """The stored value an existence proof carries (None for a non-existence proof): what the proof is checked
    for, and what the answer's fields are compared with."""
    if proof_type == NONEXIST_OP_TYPE:
        return None
    if proof_type != EXIST_OP_TYPE:
        raise ProofInvalid(f"unknown proof type {proof_type!r}; expected {EXIST_OP_TYPE} or {NONEXIST_OP_TYPE}")
    commitment = decode_commitment_proof(proof)
    if commitment.WhichOneof("proof") != "exist":
        raise ProofInvalid(f"an {EXIST_OP_TYPE} proof without an existence proof")
    return commitment.exist.value


async def prove_answer(client: AsyncRpcClient, path: str, timeout: float = 30.0,
                       expectation: Expectation | None = None) -> ProvenAnswer:
    """The answer at `path`, its record checked against the next block's app hash; ProofInvalid if it fails.
    `expectation`: for a path whose state key comes from another proven record (`signing_info_expectation`).
    Always the latest height: a node answers a past height without a proof (docs/protocol.md 4.10)."""
    expectation = expectation or expectation_for(path)
    result = await client.abci_query(path, prove=True)
    if result.code != 0:
        raise QueryFailed(result.path, result.code, result.codespace, result.log)
    answer = result.json()
    if result.height <= 0:
        raise ProofInvalid(f"{path}: the node did not say which height its answer comes from; cannot check a proof")
    if len(result.proof_ops) != 1:
        raise ProofInvalid(f"{path}: expected one proof operation, the node sent {len(result.proof_ops)}")
    operation = result.proof_ops[0]
    if operation.key != expectation.key:
        raise ProofInvalid(f"{path}: the proof is for a different state key than the one this query reads")
    record = proven_record(operation.type, operation.data)
    await client.wait_for_height(result.height + 1, timeout)
    header = await client.block(result.height + 1)
    try:
        check_proof(header.app_hash, expectation.key, record, operation.type, operation.data)
        expectation.check(record, answer)
    except ProofInvalid as exc:
        raise ProofInvalid(f"{path}: the answer at height {result.height} does NOT match the app hash "
                           f"{header.app_hash.hex().upper()} of block {header.height}: {exc}") from None
    return ProvenAnswer(path, answer, result.height, header.height, header.app_hash, record is not None,
                        expectation.fields)
