"""Committees: each sampled segment is verified by k validators drawn by stake from the sampling seed; a committee
decides alone only when it is unanimous, and any dissent escalates the segment to the whole validator set,
decided by two thirds of its power, whose losing side pays (issue 32 item 1)."""

from __future__ import annotations

from collections import Counter

from market_helpers import MARKET_PARAMS, Market, assert_fails, event_actions, verdict_message
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import NotOnCommittee
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.market.sampling import draw_committee
from trolly.chain.validators import get_validator

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


def test_a_draw_with_a_power_floor_goes_on_past_k_until_it_holds_more_than_a_third():
    candidates = [(op, 10) for op in OPERATORS]  # 60 power
    committee = draw_committee(b"s" * 32, 1, 0, b"w" * 20, 0, 0, candidates, 1, beyond_third_of=60)
    assert len(committee) == 3  # 30 > 20 only with a third member
    assert len(draw_committee(b"s" * 32, 1, 0, b"w" * 20, 0, 0, candidates[:1], 1, beyond_third_of=60)) == 1


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


PENALTY = 1_000_000  # lazy_verifier_penalty's default: the floor of a losing verdict's penalty
REVEAL_WINDOW = 10


def setup(make_chain, validators=5, **params):
    chain = make_chain(accounts=3, validators=validators,
                       params={"market": {**MARKET_PARAMS, "committee_size": 3, **params}})
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


def votes_block(chain, task_id, item, votes):
    output = chain.block(*[chain.tx(op, verdict_message(op, task_id, item, v)) for op, v in votes])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    return output


def test_only_the_committee_sees_and_votes_on_a_segment_and_only_all_of_it_decides_at_once(make_chain):
    chain, market, task_id = setup(make_chain)
    items = committee_items(chain, market, task_id)
    for worker, (item, members) in items.items():
        assert len(members) == 3
        outsiders = [op for op in chain.operators if op not in members]
        assert all(i["worker"] != worker for op in outsiders for i in market.to_verify(op))
        assert_fails(chain.deliver(outsiders[0], verdict_message(outsiders[0], task_id, item, VERDICT_PASS)),
                     NotOnCommittee)
    worker, (item, members) = next(iter(items.items()))
    # Two of three equal members are two thirds of the committee, but the third has not spoken yet.
    output = votes_block(chain, task_id, item, [(op, VERDICT_FAIL) for op in members[:2]])
    assert event_actions(output, "segment_decided") == []
    output = votes_block(chain, task_id, item, [(members[2], VERDICT_FAIL)])
    assert event_actions(output, "segment_decided")[0]["decision"] == "fail"


def test_a_unanimous_two_thirds_of_a_committee_decides_when_the_window_closes(make_chain):
    """A silent member does not send every segment to the whole set: when the window closes, voters that all
    agree and hold two thirds of the committee decide."""
    chain, market, task_id = setup(make_chain)
    for item, members in committee_items(chain, market, task_id).values():
        votes_block(chain, task_id, item, [(op, VERDICT_PASS) for op in members[:2]])
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    assert [a for o in outputs for a in event_actions(o, "committee_escalated")] == []
    settled = [a for o in outputs for a in event_actions(o, "round_settled")]
    assert (settled[0]["passed"], settled[0]["unverified"]) == ("2", "0")


def test_a_dissent_escalates_to_the_whole_set_with_a_fresh_window_and_its_losing_side_pays(make_chain):
    chain, market, task_id = setup(make_chain)
    items = committee_items(chain, market, task_id)
    worker, (item, members) = next(iter(items.items()))
    votes_block(chain, task_id, item, [(members[0], VERDICT_PASS), (members[1], VERDICT_FAIL),
                                       (members[2], VERDICT_PASS)])
    assert market.round_commitments(task_id, 0)[worker]["decisions"] == ["undecided"]  # all voted, not as one
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    escalated = [a for o in outputs for a in event_actions(o, "committee_escalated")]
    assert (worker, "5") in {(a["worker"], a["size"]) for a in escalated}  # the silent other worker's too
    assert [a for o in outputs for a in event_actions(o, "round_settled")] == []
    commitment = market.round_commitments(task_id, 0)[worker]
    assert commitment["escalated"] == [1] and len(commitment["committees"][0]) == 5
    assert commitment["committees"][0][:3] == [encode_address(op.address) for op in members]
    newcomers = [op for op in chain.operators if op not in members]
    # Two thirds of five equal validators is four: the two PASS members and the two newcomers.
    output = votes_block(chain, task_id, item, [(op, VERDICT_PASS) for op in newcomers])
    assert any(a["worker"] == worker and a["decision"] == "pass" for a in event_actions(output, "segment_decided"))
    stake = get_validator(chain.state, members[1].address).stake
    outputs = chain.advance(MARKET_PARAMS["verification_window"] + REVEAL_WINDOW + 2)  # the other worker's too
    losing = [a for o in outputs for a in event_actions(o, "losing_verdict")]
    assert [(a["validator"], a["verdict"], a["penalty"]) for a in losing] == [
        (encode_address(members[1].address), "fail", str(PENALTY))]  # 5 % of 2 TRL is below the floor
    assert get_validator(chain.state, members[1].address).stake <= stake - PENALTY


def test_a_coalition_under_a_third_holding_most_seats_cannot_decide_against_an_honest_dissent(make_chain):
    """Attack (issue 32 item 1): two validators of seven (2/7 of the power, under a third) fill two of the three
    seats of an honest worker's committee and vote FAIL without replaying. Two thirds of the committee decided
    before; now the honest member's PASS escalates the segment to the whole set, which passes it: the worker is
    paid and keeps its collateral, and each coalition member loses `losing_verdict_penalty_bps` of its stake."""
    chain = make_chain(accounts=3, validators=7, stakes=[30 * 10**6] * 7,
                       params={"market": {**MARKET_PARAMS, "committee_size": 3}})
    market = Market(chain)
    collateral = 4 * 10**6
    task_id = market.open_task(workers=2, collateral=collateral, samples_per_worker=1)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    items = committee_items(chain, market, task_id)
    (victim, (item, members)), (other, (other_item, other_members)) = items.items()
    coalition, honest = members[:2], members[2]
    output = votes_block(chain, task_id, item, [(op, VERDICT_FAIL) for op in coalition] + [(honest, VERDICT_PASS)])
    assert event_actions(output, "slash") == [] and event_actions(output, "segment_decided") == []
    votes_block(chain, task_id, other_item, [(op, VERDICT_PASS) for op in other_members])
    chain.advance(MARKET_PARAMS["verification_window"])  # the window closes: the whole set takes it up
    rest = [op for op in chain.operators if op not in members]
    output = votes_block(chain, task_id, item, [(op, VERDICT_PASS) for op in rest])
    assert any(a["worker"] == victim and a["decision"] == "pass" for a in event_actions(output, "segment_decided"))
    member = next(m for m in market.task(task_id)["members"] if m["worker"] == victim)
    assert member["status"] == "active" and member["slashed"] == 0 and member["collateral"] == collateral
    assert member["paid"] > 0
    stakes = {op.address: get_validator(chain.state, op.address).stake for op in coalition}
    outputs = chain.advance(REVEAL_WINDOW + 2)
    # Nobody revealed here, so each is lazy on every segment it voted on (the coalition's on the victim's first),
    # then loses 5 % of what it has left for the losing verdict.
    lazy = [(a["validator"], int(a["penalty"])) for o in outputs for a in event_actions(o, "lazy_verifier")]
    losing = {a["validator"]: int(a["penalty"]) for o in outputs for a in event_actions(o, "losing_verdict")}
    assert losing == {encode_address(op.address): (stakes[op.address] - PENALTY) * 500 // 10_000 for op in coalition}
    for op in coalition:
        address = encode_address(op.address)
        burned = losing[address] + sum(penalty for validator, penalty in lazy if validator == address)
        assert get_validator(chain.state, op.address).stake == stakes[op.address] - burned


def test_a_segment_still_split_after_escalation_leaves_the_worker_unverified(make_chain):
    chain, market, task_id = setup(make_chain)
    chain.advance(MARKET_PARAMS["verification_window"])  # nobody votes: every segment goes to the whole set
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
