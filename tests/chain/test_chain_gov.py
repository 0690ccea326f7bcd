"""Governance through the whole state machine: deposits move a proposal to its vote, the tally decides, a
passed proposal's changes apply at the end of its voting period, all or none, and the next task runs under
them; deposits are refunded or burned by the anchor's rules; every outcome is an event."""

from __future__ import annotations

from gov_helpers import MIN_DEPOSIT, NO, NO_WITH_VETO, SHORT_GOV, YES, Gov, event_attributes, proposal_message
from market_helpers import MARKET_PARAMS, REWARD, Market, submit_message
from trolly.chain.accounts import get_supply
from trolly.chain.gov.store import DEPOSITS
from trolly.chain.market.errors import BudgetTooLow
from trolly.chain.market.store import find_task
from trolly.chain.proto import gov_pb2
from trolly.chain.proto.staking_pb2 import MsgDelegate, MsgUndelegate
from trolly.chain.validators import TooManyEntries


def gov_chain(make_chain, stakes: list[int] | None = None, **gov):
    """Three validators (equal stakes unless given), short gov periods."""
    return make_chain(accounts=4, validators=3, stakes=stakes,
                      params={"gov": {**SHORT_GOV, **gov}, "market": MARKET_PARAMS})


def kinds(events) -> list[str]:
    return [e.type for e in events]


def test_a_passed_proposal_changing_a_market_fee_is_used_by_the_next_task(make_chain):
    chain = gov_chain(make_chain)
    market, gov = Market(chain), Gov(chain)
    old_cost = 2 * (REWARD + REWARD * 200 // 10_000 + REWARD * 300 // 10_000)
    new_cost = 2 * (REWARD + REWARD * 1_000 // 10_000 + REWARD * 300 // 10_000)
    proposal_id = gov.submit(("market", "validator_fee_bps", 1_000))
    assert chain.query("/params/market")["validator_fee_bps"] == 200  # nothing changes before the tally
    gov.vote_all(proposal_id, YES)
    events = gov.finish(proposal_id)
    assert kinds(events)[-1] == "proposal_passed"
    assert event_attributes(chain.outputs[-1], "param_changed") == {
        "proposal_id": str(proposal_id), "section": "market", "key": "validator_fee_bps", "value": "1000"}
    assert chain.query("/params/market")["validator_fee_bps"] == 1_000
    short = chain.deliver(market.requester, submit_message(budget=old_cost))
    assert short.code == BudgetTooLow.code and str(new_cost) in short.log
    task_id = market.submit(budget=new_cost)
    assert find_task(chain.state, task_id).terms["validator_fee_bps"] == 1_000


def test_deposits_from_others_start_the_vote_and_are_refunded_when_it_is_decided(make_chain):
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    proposer, backer = chain.accounts[:2]
    before = chain.balance(proposer), chain.balance(backer)
    proposal_id = gov.submit(("market", "reveal_window", 12), deposit=MIN_DEPOSIT // 4)
    assert gov.proposal(proposal_id)["status"] == "deposit_period"
    assert chain.deliver(chain.operators[0], gov_pb2.MsgVote(proposal_id=proposal_id, option=YES)).code != 0
    result = chain.deliver(backer, gov_pb2.MsgDeposit(proposal_id=proposal_id, amount=MIN_DEPOSIT))
    assert result.ok and "proposal_voting_started" in kinds(result.events)
    assert chain.balance(DEPOSITS) == MIN_DEPOSIT * 5 // 4
    gov.vote_all(proposal_id, YES)
    gov.finish(proposal_id)
    assert gov.proposal(proposal_id)["status"] == "passed" and gov.proposal(proposal_id)["deposits"] == []
    assert (chain.balance(proposer), chain.balance(backer)) == before and chain.balance(DEPOSITS) == 0
    assert chain.query("/params/market")["reveal_window"] == 12


def test_a_proposal_short_of_the_minimum_deposit_is_deleted_and_refunded_when_its_period_ends(make_chain):
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    before = chain.balance(gov.proposer)
    proposal_id = gov.submit(title="text only", deposit=MIN_DEPOSIT - 1)
    events = gov.finish(proposal_id)
    assert kinds(events) == ["deposit_refunded", "proposal_dropped"]
    assert chain.balance(gov.proposer) == before and chain.query("/gov/proposals")["proposals"] == []


def test_with_burn_proposal_deposit_prevote_an_unfunded_proposals_deposit_is_burned(make_chain):
    chain = gov_chain(make_chain, burn_proposal_deposit_prevote=1)
    gov = Gov(chain)
    supply = get_supply(chain.state)
    proposal_id = gov.submit(title="text only", deposit=MIN_DEPOSIT - 1)
    assert kinds(gov.finish(proposal_id)) == ["deposit_burned", "proposal_dropped"]
    assert get_supply(chain.state) == supply - (MIN_DEPOSIT - 1)


def test_a_proposal_that_misses_quorum_changes_nothing_and_its_deposit_is_refunded(make_chain):
    chain = gov_chain(make_chain)  # three validators of equal stake: one third is below the 33.4 % quorum
    gov = Gov(chain)
    before = chain.balance(gov.proposer)
    proposal_id = gov.submit(("market", "reveal_window", 12))
    gov.vote_all(proposal_id, YES, voters=chain.operators[:1])
    events = gov.finish(proposal_id)
    assert kinds(events)[-1] == "proposal_rejected" and "quorum" in gov.proposal(proposal_id)["outcome"]
    assert chain.query("/params/market")["reveal_window"] == MARKET_PARAMS.get("reveal_window", 10)
    assert chain.balance(gov.proposer) == before


def test_with_burn_vote_quorum_a_missed_quorum_burns_the_deposit(make_chain):
    chain = gov_chain(make_chain, burn_vote_quorum=1)
    gov = Gov(chain)
    supply = get_supply(chain.state)
    proposal_id = gov.submit(title="text only")
    assert "deposit_burned" in kinds(gov.finish(proposal_id))
    assert get_supply(chain.state) == supply - MIN_DEPOSIT


def test_a_vetoed_proposal_is_rejected_and_its_deposit_burned(make_chain):
    chain = gov_chain(make_chain, stakes=[10_000_000, 10_000_000, 11_000_000])  # the veto holds 35.5 %
    gov = Gov(chain)
    supply = get_supply(chain.state)
    proposal_id = gov.submit(("market", "reveal_window", 12))
    gov.vote_all(proposal_id, YES, voters=chain.operators[:2])
    gov.vote_all(proposal_id, NO_WITH_VETO, voters=chain.operators[2:])
    events = gov.finish(proposal_id)
    assert kinds(events)[-2:] == ["deposit_burned", "proposal_rejected"]
    assert "vetoed" in gov.proposal(proposal_id)["outcome"] and get_supply(chain.state) == supply - MIN_DEPOSIT


def test_a_later_vote_replaces_the_earlier_one(make_chain):
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    proposal_id = gov.submit(("market", "reveal_window", 12))
    gov.vote_all(proposal_id, YES)
    result = gov.vote(proposal_id, chain.operators[0], NO)
    assert event_attributes(result, "proposal_vote")["replaced"] == "true"
    live = chain.query(f"/gov/tally/{proposal_id}")
    assert (live["final"], live["tally"]["yes"], live["tally"]["no"]) == (False, 20_000_000, 10_000_000)
    assert len(chain.query(f"/gov/votes/{proposal_id}")["votes"]) == 3
    gov.finish(proposal_id)
    assert gov.proposal(proposal_id)["final_tally"]["no"] == 10_000_000


def test_changes_that_no_longer_hold_when_applied_fail_the_proposal_whole(make_chain):
    """Another proposal passed meanwhile (staking unbonding shortened): this one's longer verification window
    would now outlast the unbonding, so it fails at application and neither of its changes is applied."""
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    window = chain.query("/params/market")["verification_window"]
    late = gov.submit(("market", "validator_fee_bps", 900), ("market", "verification_window", 200),
                      deposit=MIN_DEPOSIT // 2)
    early = gov.submit(("staking", "unbonding_blocks", 400))  # fine with today's window, not with 200
    gov.vote_all(early, YES)
    assert chain.deliver(chain.accounts[1], gov_pb2.MsgDeposit(proposal_id=late, amount=MIN_DEPOSIT)).ok
    gov.vote_all(late, YES)
    gov.finish(early)
    assert gov.proposal(early)["status"] == "passed" and chain.query("/params/staking")["unbonding_blocks"] == 400
    assert gov.proposal(late)["status"] == "voting_period"
    gov.finish(late)
    failed = gov.proposal(late)
    assert failed["status"] == "failed" and "no longer hold" in failed["outcome"]
    assert "unbonding_blocks" in failed["outcome"]
    assert kinds(chain.outputs[-1].events)[-1] == "proposal_failed"
    market = chain.query("/params/market")
    assert (market["validator_fee_bps"], market["verification_window"]) == (200, window)
    assert failed["deposits"] == [] and chain.balance(DEPOSITS) == 0


def test_a_passed_text_proposal_only_records_its_outcome(make_chain):
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    params = chain.query("/params")
    proposal_id = gov.submit(title="we like small models", summary="a signal")
    gov.vote_all(proposal_id, YES)
    gov.finish(proposal_id)
    assert gov.proposal(proposal_id)["status"] == "passed" and chain.query("/params") == params


def test_governance_can_change_its_own_params(make_chain):
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    proposal_id = gov.submit(("gov", "voting_period_blocks", 9), ("gov", "quorum_bps", 5_000))
    gov.vote_all(proposal_id, YES)
    gov.finish(proposal_id)
    assert (chain.query("/params/gov")["voting_period_blocks"], chain.query("/params/gov")["quorum_bps"]) == (9, 5_000)
    later = gov.submit(title="next")
    assert gov.proposal(later)["voting_end_height"] == chain.height + 9


def test_an_initial_deposit_at_the_minimum_starts_the_vote_at_once(make_chain):
    chain = gov_chain(make_chain)
    result = chain.deliver(chain.accounts[0], proposal_message(("market", "reveal_window", 12)))
    assert kinds(result.events)[-2:] == ["proposal_submitted", "proposal_voting_started"]


def test_a_delegators_vote_overrides_its_validators_for_its_own_stake(make_chain):
    """Delegations vote as in the anchor: validator 0's 10 TRL self-bond plus a 20 TRL delegation vote yes with
    its operator until the delegator votes no itself, whichever voted first; then its 20 TRL count as no, and a
    proposal its validator alone would have passed is rejected."""
    chain = gov_chain(make_chain, stakes=[10_000_000, 10_000_000, 10_000_000])
    gov = Gov(chain)
    delegator, operator = chain.accounts[1], chain.operators[0]
    assert chain.deliver(delegator, MsgDelegate(validator=operator.address, amount=20_000_000)).ok
    proposal_id = gov.submit(("market", "reveal_window", 12))
    gov.vote_all(proposal_id, NO, voters=chain.operators[1:])
    gov.vote_all(proposal_id, YES, voters=chain.operators[:1])
    live = chain.query(f"/gov/tally/{proposal_id}")["tally"]
    assert (live["yes"], live["no"], live["total_bonded"]) == (30_000_000, 20_000_000, 50_000_000)
    assert gov.vote(proposal_id, delegator, NO).ok
    gov.finish(proposal_id)
    proposal = gov.proposal(proposal_id)
    assert (proposal["status"], proposal["final_tally"]["yes"], proposal["final_tally"]["no"]) == (
        "rejected", 10_000_000, 40_000_000)
    assert chain.query("/params/market")["reveal_window"] == MARKET_PARAMS.get("reveal_window", 10)


def test_a_delegator_that_votes_first_keeps_its_vote_when_its_validator_votes_later(make_chain):
    """The override does not depend on the order: the delegator's yes stands against its validator's later no."""
    chain = gov_chain(make_chain, stakes=[10_000_000, 10_000_000, 10_000_000])
    gov = Gov(chain)
    delegator, operator = chain.accounts[2], chain.operators[2]
    assert chain.deliver(delegator, MsgDelegate(validator=operator.address, amount=5_000_000)).ok
    proposal_id = gov.submit(title="text only")
    assert gov.vote(proposal_id, delegator, YES).ok
    gov.vote_all(proposal_id, NO, voters=chain.operators[2:])
    gov.vote_all(proposal_id, YES, voters=chain.operators[:2])
    gov.finish(proposal_id)
    final = gov.proposal(proposal_id)["final_tally"]
    assert (final["yes"], final["no"], final["total_bonded"]) == (25_000_000, 10_000_000, 35_000_000)


def test_delegations_staking_params_are_governed_and_the_next_message_obeys_them(make_chain):
    """Delegation's params (`max_entries`, `commission_change_blocks`) change by proposal like any other: once
    `max_entries` is 1, a second undelegation in flight from the same validator is refused."""
    chain = gov_chain(make_chain)
    gov = Gov(chain)
    delegator, operator = chain.accounts[1], chain.operators[0]
    assert chain.deliver(delegator, MsgDelegate(validator=operator.address, amount=4_000_000)).ok
    proposal_id = gov.submit(("staking", "max_entries", 1), ("staking", "commission_change_blocks", 10))
    gov.vote_all(proposal_id, YES)
    gov.finish(proposal_id)
    staking = chain.query("/params/staking")
    assert (staking["max_entries"], staking["commission_change_blocks"]) == (1, 10)
    assert chain.deliver(delegator, MsgUndelegate(validator=operator.address, amount=1_000_000)).ok
    refused = chain.deliver(delegator, MsgUndelegate(validator=operator.address, amount=1_000_000))
    assert refused.code == TooManyEntries.code and "1 unbonding entries" in refused.log
