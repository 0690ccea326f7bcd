"""Checking a query answer against the chain's app hash, instead of trusting the node's word.

A query at height H answers from the state after block H. That state's Merkle root (the app hash) is only
written into the header of the NEXT block, H + 1 (CometBFT headers carry the app hash of the previous
block's result). So `prove_answer` asks with `prove=true`, waits for block H + 1, takes `header.app_hash`,
and checks the answer's ICS23 proofs (`trolly.chain.ics23_proofs` makes them, `trolly.wallet.ics23` verifies
them), one per state key the answer depends on:

- an existence proof (`ics23:trolly`) proves a key's stored record; a non-existence proof
  (`ics23:trolly-hashed`) proves a key absent;
- the wallet then runs the chain's own query handler over those proven values only
  (`trolly.chain.query_reads.ProvenReader`): a read of a key no proof covers fails, a listing yields exactly
  the keys its proven listing index names (`trolly.chain.listing_index`), so nothing can be left out; and
  the node's answer must equal what the handler computes, every field. A node that tampers with a balance,
  drops a validator from a listing or proves another key is caught.

So the whole answer is proven, listings and answers built from many keys (delegations, rewards, tallies)
included. What this does not do: check the header's commit signatures (that is a light client's job).
Against a single node it shows that the answer is consistent with the app hash that node put in its chain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from trolly.chain import app as chain_app
from trolly.chain.codec import canonical_json
from trolly.chain.errors import ChainError
from trolly.chain.ics23_proofs import EXIST_OP_TYPE, NONEXIST_OP_TYPE, TROLLY_HASHED_SPEC, TROLLY_SPEC
from trolly.chain.query_reads import ProvenReader, UnprovenRead
from trolly.chain.state import State

from .errors import ProofInvalid, QueryFailed
from .ics23 import decode_commitment_proof, verify_membership, verify_non_membership
from .rpc import AsyncRpcClient
from .rpc_types import ProofOp



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
    """False when every key the answer read is proven absent (an account never funded, an empty listing)."""
    fields: tuple[str, ...]
    """The answer's fields that the proofs cover: every one (an object's keys; `entries` for a list)."""
    keys: int
    """How many state keys were proven for the answer."""

    def proof_json(self) -> dict:
        return {"verified": True, "note": self.note(), "query_height": self.height,
                "header_height": self.header_height, "app_hash": self.app_hash.hex().upper(),
                "present": self.present, "fields": list(self.fields), "keys": self.keys}

    def note(self) -> str:
        return proved_at([self.height])


def proved_at(heights: list[int]) -> str:
    """`proved at height H`, or `proved at heights A to B` for answers read over several blocks (ascending)."""
    if heights[0] == heights[-1]:
        return f"proved at height {heights[0]}"
    return f"proved at heights {heights[0]} to {heights[-1]}"


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
    for, and what the answer is recomputed from."""
    if proof_type == NONEXIST_OP_TYPE:
        return None
    if proof_type != EXIST_OP_TYPE:
        raise ProofInvalid(f"unknown proof type {proof_type!r}; expected {EXIST_OP_TYPE} or {NONEXIST_OP_TYPE}")
    commitment = decode_commitment_proof(proof)
    if commitment.WhichOneof("proof") != "exist":
        raise ProofInvalid(f"an {EXIST_OP_TYPE} proof without an existence proof")
    return commitment.exist.value


def proven_values(app_hash: bytes, ops: tuple[ProofOp, ...] | list[ProofOp]) -> dict[bytes, bytes | None]:
    """Each proof operation's key and its proven value (None: proven absent), every proof checked against
    `app_hash`; ProofInvalid for one that does not hold, or a key proven twice."""
    values: dict[bytes, bytes | None] = {}
    for op in ops:
        key = bytes(op.key)
        if key in values:
            raise ProofInvalid(f"key {key.hex()} is proven twice")
        record = proven_record(op.type, op.data)
        try:
            check_proof(app_hash, key, record, op.type, op.data)
        except ProofInvalid as exc:
            raise ProofInvalid(f"the proof of key {key.hex()} does not hold: {exc}") from None
        values[key] = record
    return values


def recomputed_answer(path: str, values: dict[bytes, bytes | None]) -> Any:
    """The answer the chain's own query handler gives from the proven values alone (as JSON decodes it);
    ProofInvalid when it needs a key no proof covers, or the proven state does not answer at all."""
    try:
        result = chain_app.query(State(ProvenReader(values)), path)
    except UnprovenRead as exc:
        raise ProofInvalid(str(exc)) from None
    except ChainError as exc:
        raise ProofInvalid(f"the proven state answers {exc.log!r}, not what the node answered") from None
    return json.loads(canonical_json(result.value))


def check_answer(path: str, answer: Any, values: dict[bytes, bytes | None]) -> tuple[str, ...]:
    """That `answer` is exactly what the proven values give at `path`; the fields it covers (every one)."""
    expected = recomputed_answer(path, values)
    if isinstance(expected, dict) and isinstance(answer, dict):
        wrong = sorted(name for name in expected.keys() | answer.keys()
                       if answer.get(name, _MISSING) != expected.get(name, _MISSING))
        if wrong:
            raise ProofInvalid(f"the answer's {', '.join(wrong)} differ from the proven record")
        return tuple(sorted(answer))
    if expected != answer:
        shown = len(answer) if isinstance(answer, list) else "not a list of"
        proven = len(expected) if isinstance(expected, list) else "not a list of"
        raise ProofInvalid(f"the answer's entries differ from the proven records ({shown} shown, {proven} proven)")
    return ("entries",)


_MISSING = object()


async def prove_answer(client: AsyncRpcClient, path: str, timeout: float = 30.0) -> ProvenAnswer:
    """The answer at `path`, every key it depends on checked against the next block's app hash and the answer
    recomputed from them; ProofInvalid if it fails. Always the latest height: a node answers a past height
    without a proof (docs/protocol.md 4.10)."""
    result = await client.abci_query(path, prove=True)
    if result.code != 0:
        raise QueryFailed(result.path, result.code, result.codespace, result.log)
    answer = result.json()
    if result.height <= 0:
        raise ProofInvalid(f"{path}: the node did not say which height its answer comes from; cannot check a proof")
    if not result.proof_ops:
        raise ProofInvalid(f"{path}: the node sent no proof{f' ({result.info})' if result.info else ''}")
    await client.wait_for_height(result.height + 1, timeout)
    header = await client.block(result.height + 1)
    try:
        values = proven_values(header.app_hash, result.proof_ops)
        fields = check_answer(path, answer, values)
    except ProofInvalid as exc:
        raise ProofInvalid(f"{path}: the answer at height {result.height} does NOT match the app hash "
                           f"{header.app_hash.hex().upper()} of block {header.height}: {exc}") from None
    return ProvenAnswer(path, answer, result.height, header.height, header.app_hash,
                        any(value is not None for value in values.values()), fields, len(values))
