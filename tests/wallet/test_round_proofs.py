"""Proofs of a task's round pages and of a validator's verification work, checked as the wallet checks them
(`wallet.proofs`): the round page reads each commitment by key from the proven member list and each vote by its
committee's keys (`tally.committee_votes`), `/market/verify` finds the pending segments through the open tasks'
records (`chain/market/verify_work.py`); every key is proven and the answer recomputed from the proofs alone.

Before, both answers scanned a prefix no listing index covers (a segment's votes, every pending segment) and the
node sent no proof: `node_answer` refused them. Each attack is a node that answers with valid-looking proofs: a
commitment or a vote left out, a tampered vote or answer, another key's proof.
"""

from __future__ import annotations

import pytest
from market_helpers import MARKET_PARAMS, Market, verdict_message
from proof_helpers import accepted, node_answer, with_value

from trolly.chain import keys
from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_PASS
from trolly.wallet.errors import ProofInvalid
from trolly.wallet.rpc_types import ProofOp


@pytest.fixture
def voted(make_chain):
    """A running task of two workers, round 0 committed and sampled, every committee of all three validators;
    operator 0 has voted PASS on every segment, the others not yet."""
    chain = make_chain(accounts=3, validators=3, params={"market": {**MARKET_PARAMS, "committee_size": 3}})
    market = Market(chain)
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()  # sampling
    operator = chain.operators[0]
    output = chain.block(*[chain.tx(operator, verdict_message(operator, task_id, item, VERDICT_PASS))
                           for item in market.to_verify(operator)])
    assert all(r.ok for r in output.tx_results)
    return chain, market, task_id


def round_path(task_id: int) -> str:
    return f"/market/task/{task_id}/round/0"


def vote_ops(ops: list[ProofOp]) -> list[ProofOp]:
    return [op for op in ops if op.key[:1] == keys.MARKET_VERDICT]


def test_a_round_page_with_its_commitments_and_votes_is_proven(voted):
    chain, _, task_id = voted
    answer, ops, root = node_answer(chain.kv.items, round_path(task_id))
    assert len(answer["commitments"]) == 2 and all(c["verdicts"] for c in answer["commitments"])
    assert "commitments" in accepted(round_path(task_id), answer, ops, root)
    assert vote_ops(ops)  # each committee member's vote key, present or proven absent


def test_a_round_page_with_a_commitment_left_out_is_refused(voted):
    """Attack: the node leaves a member's commitment out of the round, with or without its proof."""
    chain, _, task_id = voted
    answer, ops, root = node_answer(chain.kv.items, round_path(task_id))
    shorter = {**answer, "commitments": answer["commitments"][1:]}
    with pytest.raises(ProofInvalid, match="commitments differ"):
        accepted(round_path(task_id), shorter, ops, root)
    without = [op for op in ops if op.key[:1] != keys.MARKET_COMMIT]
    with pytest.raises(ProofInvalid, match="no proof covers"):
        accepted(round_path(task_id), shorter, without, root)


def test_a_round_page_with_a_vote_left_out_is_refused(voted):
    """Attack: the node hides a validator's vote on a segment, with or without the vote's proof."""
    chain, _, task_id = voted
    answer, ops, root = node_answer(chain.kv.items, round_path(task_id))
    first, *rest = answer["commitments"]
    hidden = {**answer, "commitments": [{**first, "verdicts": first["verdicts"][1:]}, *rest]}
    with pytest.raises(ProofInvalid, match="commitments differ"):
        accepted(round_path(task_id), hidden, ops, root)
    present = next(op for op in vote_ops(ops) if chain.kv.items.get(op.key) is not None)
    with pytest.raises(ProofInvalid, match="no proof covers"):
        accepted(round_path(task_id), hidden, [op for op in ops if op is not present], root)


def test_a_round_page_with_a_tampered_vote_or_another_keys_proof_is_refused(voted):
    """Attacks: a PASS shown as FAIL in the answer; the vote's record proven with another value; one vote's proof
    sent as another vote key's."""
    chain, _, task_id = voted
    answer, ops, root = node_answer(chain.kv.items, round_path(task_id))
    first, *rest = answer["commitments"]
    flipped = [{**first["verdicts"][0], "verdict": "fail"}, *first["verdicts"][1:]]
    with pytest.raises(ProofInvalid, match="commitments differ"):
        accepted(round_path(task_id), {**answer, "commitments": [{**first, "verdicts": flipped}, *rest]}, ops, root)
    present = [op for op in vote_ops(ops) if chain.kv.items.get(op.key) is not None]
    forged = [with_value(op, chain.kv.items[op.key] + b" ") if op is present[0] else op for op in ops]
    with pytest.raises(ProofInvalid, match="does not lead to the app hash"):
        accepted(round_path(task_id), answer, forged, root)
    swapped = [ProofOp(op.type, present[1].key, present[0].data) if op is present[1] else op for op in ops]
    with pytest.raises(ProofInvalid, match="another key"):
        accepted(round_path(task_id), answer, swapped, root)


def test_a_round_whose_votes_were_deleted_is_proven_without_them(voted):
    chain, market, task_id = voted
    market.vote(chain.operators[1:], task_id)  # the round settles; its reveal window closes unrevealed
    chain.advance(MARKET_PARAMS["verification_window"] + 10)
    answer, ops, root = node_answer(chain.kv.items, round_path(task_id))
    assert all(c["verdicts_deleted"] and c["verdicts"] == [] for c in answer["commitments"])
    assert accepted(round_path(task_id), answer, ops, root) and vote_ops(ops) == []


def verify_path(operator) -> str:
    return f"/market/verify/{encode_address(operator.address)}"


def test_a_validators_verification_work_is_proven(voted):
    chain, _, _ = voted
    for operator, expected in ((chain.operators[0], 0), (chain.operators[1], 2)):
        answer, ops, root = node_answer(chain.kv.items, verify_path(operator))
        assert len(answer["segments"]) >= expected
        assert accepted(verify_path(operator), answer, ops, root) == ("segments", "validator")
    assert any(op.key[:1] == keys.MARKET_PENDING_SEGMENT for op in ops)


def test_verification_work_with_a_segment_left_out_tampered_or_another_keys_proof_is_refused(voted):
    """Attacks: the node hides a segment from a validator (it would miss its vote and be penalised), changes the
    update hash it must check, drops the pending key's proof, or proves one pending key with another's proof."""
    chain, _, _ = voted
    path = verify_path(chain.operators[1])
    answer, ops, root = node_answer(chain.kv.items, path)
    segments = answer["segments"]
    assert len(segments) >= 2
    with pytest.raises(ProofInvalid, match="segments differ"):
        accepted(path, {**answer, "segments": segments[1:]}, ops, root)
    tampered = [{**segments[0], "update_hash": "00" * 32}, *segments[1:]]
    with pytest.raises(ProofInvalid, match="segments differ"):
        accepted(path, {**answer, "segments": tampered}, ops, root)
    pending = [op for op in ops if op.key[:1] == keys.MARKET_PENDING_SEGMENT]
    with pytest.raises(ProofInvalid, match="no proof covers"):
        accepted(path, answer, [op for op in ops if op is not pending[0]], root)
    swapped = [ProofOp(op.type, pending[1].key, pending[0].data) if op is pending[1] else op for op in ops]
    with pytest.raises(ProofInvalid, match="another key"):
        accepted(path, answer, swapped, root)
