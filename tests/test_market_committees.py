"""Committees: each sampled segment is verified by k validators drawn by stake from the sampling seed, decided by
two thirds of the committee's power, and a split committee escalates to a larger one."""

from __future__ import annotations

from collections import Counter

from market_helpers import MARKET_PARAMS, Market, assert_fails, event_actions, verdict_message
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import NotOnCommittee
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.market.sampling import draw_committee

OPERATORS = [bytes([i]) * 20 for i in range(1, 7)]


def test_a_committee_is_drawn_without_repeats_and_is_the_same_for_the_same_seed():
    candidates = [(op, 10) for op in OPERATORS]
    first = draw_committee(b"s" * 32, 1, 0, b"w" * 20, 3, 0, candidates, 4)
    assert len(first) == 4 and len(set(first)) == 4
    assert draw_committee(b"s" * 32, 1, 0, b"w" * 20, 3, 0, candidates, 4) == first
    others = {tuple(draw_committee(bytes([i]) * 32, 1, 0, b"w" * 20, 3, 0, candidates, 4)) for i in range(20)}
    assert len(others) > 1  # another seed, another committee


def test_a_committee_holds_everyone_when_fewer_are_eligible_and_never_someone_without_power():
    candidates = [(OPERATORS[0], 10), (OPERATORS[1], 0), (OPERATORS[2], 5)]
    assert sorted(draw_committee(b"s" * 32, 1, 0, b"w" * 20, 0, 0, candidates, 7)) == [OPERATORS[0], OPERATORS[2]]


def test_an_escalation_keeps_the_first_committee_and_adds_to_it():
    candidates = [(op, 10) for op in OPERATORS]
    first = draw_committee(b"s" * 32, 1, 0, b"w" * 20, 0, 0, candidates, 2)
    larger = draw_committee(b"s" * 32, 1, 0, b"w" * 20, 0, 1, candidates, 5, already=first)
    assert larger[:2] == first and len(set(larger)) == 5


def test_committees_are_drawn_by_power():
    """A validator with 8 of 11 power sits on a one-seat committee far more often than one with 1."""
    candidates = [(OPERATORS[0], 8), (OPERATORS[1], 1), (OPERATORS[2], 2)]
    seats = Counter(draw_committee(i.to_bytes(32, "big"), 1, 0, b"w" * 20, 0, 0, candidates, 1)[0] for i in range(600))
    assert seats[OPERATORS[0]] > 3 * seats[OPERATORS[2]] > 0 and seats[OPERATORS[2]] > seats[OPERATORS[1]] > 0


def setup(make_chain, validators=5, **params):
    chain = make_chain(accounts=3, validators=validators,
                       params={"market": {**MARKET_PARAMS, "committee_size": 3, "escalated_committee_size": 5, **params}})
    market = Market(chain)
    task_id = market.open_task(workers=2, collateral=4 * 10**6, samples_per_worker=1)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    return chain, market, task_id


def committee_items(chain, market, task_id):
    """worker -> (its sampled item, the operators of its committee)."""
    by_address = {encode_address(op.address): op for op in chain.operators}
    found = {}
    for worker, commitment in market.round_commitments(task_id, 0).items():
        members = [by_address[m] for m in commitment["committees"][0]]
        item = next(i for op in members for i in market.to_verify(op) if i["worker"] == worker)
        found[worker] = (item, members)
    return found


def test_only_the_committee_sees_and_votes_on_a_segment_and_two_thirds_of_it_decide(make_chain):
    chain, market, task_id = setup(make_chain)
    items = committee_items(chain, market, task_id)
    for worker, (item, members) in items.items():
        assert len(members) == 3
        outsiders = [op for op in chain.operators if op not in members]
        assert all(i["worker"] != worker for op in outsiders for i in market.to_verify(op))
        assert_fails(chain.deliver(outsiders[0], verdict_message(outsiders[0], task_id, item, VERDICT_PASS)),
                     NotOnCommittee)
    # Two of three equal members are two thirds of the committee (2/5 of the whole power would not be).
    worker, (item, members) = next(iter(items.items()))
    output = chain.block(*[chain.tx(op, verdict_message(op, task_id, item, VERDICT_FAIL)) for op in members[:2]])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    assert event_actions(output, "segment_decided")[0]["decision"] == "fail"


def test_a_split_committee_escalates_to_a_larger_one_with_a_fresh_window(make_chain):
    chain, market, task_id = setup(make_chain)
    items = committee_items(chain, market, task_id)
    worker, (item, members) = next(iter(items.items()))
    split = [(members[0], VERDICT_PASS), (members[1], VERDICT_FAIL)]
    chain.block(*[chain.tx(op, verdict_message(op, task_id, item, v)) for op, v in split])
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    escalated = [a for o in outputs for a in event_actions(o, "committee_escalated")]
    assert {(a["worker"], a["size"]) for a in escalated} >= {(worker, "5")}
    assert [a for o in outputs for a in event_actions(o, "round_settled")] == []
    commitment = market.round_commitments(task_id, 0)[worker]
    assert commitment["escalated"] == [1] and len(commitment["committees"][0]) == 5
    assert commitment["committees"][0][:3] == [encode_address(op.address) for op in members]
    newcomers = [op for op in chain.operators if op not in members]
    # Two thirds of five equal members is four: the first PASS, the third member and the two newcomers.
    output = chain.block(*[chain.tx(op, verdict_message(op, task_id, item, VERDICT_PASS))
                           for op in newcomers + [members[2]]])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    assert any(a["worker"] == worker and a["decision"] == "pass" for a in event_actions(output, "segment_decided"))


def test_a_segment_still_split_after_escalation_leaves_the_worker_unverified(make_chain):
    chain, market, task_id = setup(make_chain)
    chain.advance(MARKET_PARAMS["verification_window"])  # nobody votes: every segment escalates once
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    settled = [a for o in outputs for a in event_actions(o, "round_settled")]
    assert (settled[0]["unverified"], settled[0]["passed"]) == ("2", "0")


def test_a_worker_that_validates_never_sits_on_its_own_committee(make_chain):
    chain = make_chain(accounts=2, validators=3, params={"market": {**MARKET_PARAMS, "committee_size": 7}})
    market = Market(chain)
    market.workers = [chain.accounts[1], chain.operators[2]]
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers)
    chain.block()
    own = market.round_commitments(task_id, 0)[encode_address(chain.operators[2].address)]
    assert all(encode_address(chain.operators[2].address) not in c for c in own["committees"])
    assert all(len(c) == 2 for c in own["committees"])
