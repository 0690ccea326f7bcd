"""Trolly's query proofs checked by a client with no Trolly code: @confio/ics23 from npm (tests/ics23_node,
pinned by its lockfile, installed by `make setup`) verifies the proofs that a real in-process app's Query
answers, against the app hash, for an account, a task and a validator; a tampered value and a wrong key must
fail, and so must a non-existence proof claimed for a present key. A listing (every validator) and an answer of
many keys (a delegator's delegations) are checked whole: each key's proof, and completeness against the
listing index record, with an entry left out of the answer or of the proofs failing.

The chain's state comes from the chain harness (genesis, a validator, a submitted task), committed into a real
LevelDB store, and `TrollyApplication.query` answers with proofs exactly as it does under CometBFT.

@confio/ics23 0.6.8 (the last published) checks a non-existence proof only when the two neighbours sit in
adjacent slots where their paths part and no empty slot lies beside either path below (it predates empty
children); Trolly's own verifier accepts the rest after checking those slots empty (`trolly.wallet.ics23`). The
non-existence case here is an absent account whose proof meets the stock conditions, found by counting.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from chain_helpers import Chain
from market_helpers import MARKET_PARAMS, submit_message

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.store import Store
from trolly.chain.crypto import encode_address
from trolly.chain.ics23_proofs import EXIST_OP_TYPE, NONEXIST_OP_TYPE, TROLLY_HASHED_SPEC, TROLLY_SPEC
from trolly.chain.proto import ics23_pb2 as ics23
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.wallet.proofs import check_proof

NODE_PROJECT = Path(__file__).resolve().parents[1] / "ics23_node"


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: `make setup` needs it for the console and this check")
    if not (NODE_PROJECT / "node_modules" / "@confio" / "ics23").is_dir():
        pytest.skip(f"@confio/ics23 is not installed in {NODE_PROJECT}: run `make setup`")
    return node


@pytest.fixture
def app(tmp_path):
    chain = Chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    result = chain.deliver(chain.accounts[0], submit_message())
    assert result.ok, result.log
    store = Store(tmp_path / "db")
    store.commit(store.prepare(dict(chain.kv.items), 1))
    yield TrollyApplication(store), chain, store
    store.close()


def proven(application, path: str) -> tuple[dict, abci.ProofOp]:
    """The answer and the proof of the record it is about (`response.key`), among those of every key it read."""
    response = application.query(abci.RequestQuery(path=path, prove=True))
    assert response.code == 0, response.log
    (op,) = [op for op in response.proof_ops.ops if op.key == response.key]
    return json.loads(response.value), op


def proven_all(application, path: str) -> tuple[object, list[dict]]:
    """The answer and every proof op (JSON for verify.js), one per state key the answer read."""
    response = application.query(abci.RequestQuery(path=path, prove=True))
    assert response.code == 0, response.log
    return json.loads(response.value), [{"type": op.type, "key": b64(op.key), "data": b64(op.data)}
                                        for op in response.proof_ops.ops]


def run_verifier(node: str, cases: list[dict], tmp_path) -> dict:
    specs = {"exist": b64(TROLLY_SPEC.SerializeToString()), "nonexist": b64(TROLLY_HASHED_SPEC.SerializeToString())}
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps({"specs": specs, "cases": cases}))
    run = subprocess.run([node, "verify.js", str(cases_file)], cwd=NODE_PROJECT, capture_output=True, text=True,
                         timeout=120)
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["results"] == {case["name"]: case["accept"] for case in cases}, run.stderr
    assert run.returncode == 0 and report["failed"] == 0
    return report


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def member_case(name: str, op, app_hash: bytes, answer: dict, check: str | None, accept: bool = True,
                value: bytes | None = None, key: bytes | None = None) -> dict:
    exist = ics23.CommitmentProof.FromString(op.data).exist
    assert op.type == EXIST_OP_TYPE
    return {"name": name, "kind": "member", "proof": b64(op.data), "app_hash": app_hash.hex(),
            "key": b64(op.key if key is None else key), "value": b64(exist.value if value is None else value),
            "answer": answer, "check": check, "accept": accept}


def stock_checkable(nonexist: ics23.NonExistenceProof) -> bool:
    """Whether a verifier without empty-child support can accept this proof: adjacent slots where the paths
    part, and the left path right-most, the right path left-most, at every step below."""
    def slot(op):
        return (len(op.prefix) - 1) // 32
    if not (nonexist.HasField("left") and nonexist.HasField("right")):
        return False
    left, right = list(nonexist.left.path), list(nonexist.right.path)
    while left and right and left[-1] == right[-1]:
        left.pop()
        right.pop()
    return (bool(left) and bool(right) and slot(right[-1]) == slot(left[-1]) + 1
            and all(slot(op) == 15 for op in left[:-1]) and all(slot(op) == 0 for op in right[:-1]))


def test_confio_ics23_verifies_account_task_and_validator_answers(app, tmp_path):
    node = node_or_skip()
    application, chain, store = app
    app_hash = store.last_app_hash
    account, account_op = proven(application, f"/account/{encode_address(chain.accounts[1].address)}")
    task, task_op = proven(application, "/market/task/1")
    validator, validator_op = proven(application, f"/validator/{encode_address(chain.operators[0].address)}")
    cases = [
        member_case("account", account_op, app_hash, account, "account"),
        member_case("task", task_op, app_hash, task, "task"),
        member_case("validator", validator_op, app_hash, validator, None),
        member_case("tampered account value", account_op, app_hash, account, None, accept=False,
                    value=ics23.CommitmentProof.FromString(account_op.data).exist.value[:7] + b"\xff"
                    + ics23.CommitmentProof.FromString(account_op.data).exist.value[8:]),
        member_case("tampered task record", task_op, app_hash, task, None, accept=False,
                    value=ics23.CommitmentProof.FromString(task_op.data).exist.value.replace(b'"open"', b'"done"')),
        member_case("wrong key", account_op, app_hash, account, None, accept=False,
                    key=bytes(validator_op.key)),
        member_case("another app hash", validator_op, hashlib.sha256(b"other").digest(), validator, None,
                    accept=False),
        member_case("answer disagrees with the proven record", account_op, app_hash,
                    {**account, "balance": account["balance"] + 1}, "account", accept=False),
    ]
    absent_key = None
    for index in range(500):
        address = encode_address(hashlib.sha256(b"nobody-%d" % index).digest()[:20])
        answer, op = proven(application, f"/account/{address}")
        assert op.type == NONEXIST_OP_TYPE and answer["balance"] == 0
        check_proof(app_hash, op.key, None, op.type, op.data)  # Trolly's verifier accepts every one
        if stock_checkable(ics23.CommitmentProof.FromString(op.data).nonexist):
            absent_key, absent_op = op.key, op
            break
    assert absent_key is not None, "no absent account whose proof a stock verifier can check"
    present_key = bytes(account_op.key)
    cases += [
        {"name": "absent account", "kind": "nonmember", "proof": b64(absent_op.data), "app_hash": app_hash.hex(),
         "key": b64(hashlib.sha256(absent_key).digest()), "accept": True},
        {"name": "present account claimed absent", "kind": "nonmember", "proof": b64(absent_op.data),
         "app_hash": app_hash.hex(), "key": b64(hashlib.sha256(present_key).digest()), "accept": False},
    ]
    assert b'"open"' in ics23.CommitmentProof.FromString(task_op.data).exist.value  # the tamper above changes it
    run_verifier(node, cases, tmp_path)


@pytest.fixture
def staked_app(tmp_path):
    """Three validators; account 0 delegates to two of them; committed to a real store."""
    chain = Chain(accounts=2, validators=3)
    for operator in chain.operators[:2]:
        assert chain.deliver(chain.accounts[0], MsgDelegate(validator=operator.address, amount=2_000_000)).ok
    store = Store(tmp_path / "db")
    store.commit(store.prepare(dict(chain.kv.items), 1))
    yield TrollyApplication(store), chain, store
    store.close()


def listing_case(name: str, ops: list[dict], app_hash: bytes, prefix: bytes, rows: list, field: str,
                 accept: bool = True) -> dict:
    return {"name": name, "kind": "listing", "ops": ops, "app_hash": app_hash.hex(), "prefix": b64(prefix),
            "entry_length": 20, "rows": rows, "address_field": field, "accept": accept}


def tampered(op: dict) -> dict:
    """The op's existence proof claiming a record with its last byte changed."""
    proof = ics23.CommitmentProof.FromString(base64.b64decode(op["data"]))
    proof.exist.value = proof.exist.value[:-1] + bytes([proof.exist.value[-1] ^ 1])
    return {**op, "data": b64(proof.SerializeToString())}


def test_confio_ics23_checks_a_whole_listing_and_a_delegators_delegations(staked_app, tmp_path):
    """With no Trolly code: the validator listing and a delegator's delegations (an answer of many keys) are
    checked op by op with @confio/ics23, and complete against their listing index. Attacks that must fail: a
    record's value tampered, an entry left out of the answer, an entry's proof left out, a proof sent for a wrong
    key, and everything checked against another app hash."""
    node = node_or_skip()
    application, chain, store = staked_app
    app_hash = store.last_app_hash
    validators, validator_ops = proven_all(application, "/validators")
    delegator = chain.accounts[0].address
    delegations, delegation_ops = proven_all(application, f"/delegations/{encode_address(delegator)}")
    rows = delegations["delegations"]
    assert len(validators) == 3 and len(rows) == 2
    record = next(i for i, op in enumerate(validator_ops) if base64.b64decode(op["key"])[:1] == b"\x10")
    other = next(op for op in validator_ops if base64.b64decode(op["key"])[:1] == b"\x10"
                 and op["key"] != validator_ops[record]["key"])
    one_delegation = next(i for i, op in enumerate(delegation_ops) if base64.b64decode(op["key"])[:1] == b"\x50")
    prefix = b"\x50" + delegator
    cases = [
        listing_case("validator listing", validator_ops, app_hash, b"\x10", validators, "operator"),
        listing_case("delegations of a delegator", delegation_ops, app_hash, prefix, rows, "validator"),
        listing_case("tampered validator record", [tampered(op) if i == record else op
                                                   for i, op in enumerate(validator_ops)],
                     app_hash, b"\x10", validators, "operator", accept=False),
        listing_case("tampered delegation record", [tampered(op) if i == one_delegation else op
                                                    for i, op in enumerate(delegation_ops)],
                     app_hash, prefix, rows, "validator", accept=False),
        listing_case("a validator left out of the answer", validator_ops, app_hash, b"\x10", validators[1:],
                     "operator", accept=False),
        listing_case("a delegation left out of the answer", delegation_ops, app_hash, prefix, rows[:1], "validator",
                     accept=False),
        listing_case("a validator's proof left out", [op for i, op in enumerate(validator_ops) if i != record],
                     app_hash, b"\x10", validators, "operator", accept=False),
        listing_case("a proof sent for a wrong key", [{**op, "key": other["key"]} if i == record else op
                                                      for i, op in enumerate(validator_ops)],
                     app_hash, b"\x10", validators, "operator", accept=False),
        listing_case("another app hash", delegation_ops, hashlib.sha256(b"other").digest(), prefix, rows,
                     "validator", accept=False),
    ]
    run_verifier(node, cases, tmp_path)
