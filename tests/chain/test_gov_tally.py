"""The tally rules on made-up stake lists: who votes with what (a delegator's vote overrides its validator's for
its own stake, as in the anchor), and what quorum, veto and threshold decide, in exact integers."""

from __future__ import annotations

import dataclasses

from trolly.chain.gov.params import GovParams
from trolly.chain.gov.store import ABSTAIN, NO, NO_WITH_VETO, YES, Tally
from trolly.chain.block import BlockContext
from trolly.chain.gov.tally import VotingStake, decide, tally_votes, voting_stakes
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.chain.slash import slash_validator
from trolly.chain.state import State
from trolly.chain.validators import active_validators, get_validator, jail_validator

VAL_A, VAL_B = b"A" * 20, b"B" * 20
DEL_1, DEL_2, DEL_3 = b"1" * 20, b"2" * 20, b"3" * 20
STAKES = [
    VotingStake(VAL_A, VAL_A, 100),  # operator A's self-bond
    VotingStake(DEL_1, VAL_A, 40),
    VotingStake(DEL_2, VAL_A, 60),
    VotingStake(VAL_B, VAL_B, 50),
    VotingStake(DEL_3, VAL_B, 30),
    VotingStake(DEL_1, VAL_B, 20),  # DEL_1 is bonded to both validators
]


def test_a_validator_votes_for_its_own_stake_and_for_every_delegator_that_did_not_vote():
    tally = tally_votes(STAKES, {VAL_A: YES})
    assert (tally.yes, tally.no, tally.total_bonded) == (200, 0, 300)


def test_a_delegators_vote_overrides_its_validators_for_its_own_stake_only():
    tally = tally_votes(STAKES, {VAL_A: YES, DEL_2: NO})
    assert (tally.yes, tally.no) == (140, 60)


def test_the_override_holds_whichever_voted_first():
    """Votes are a set at the tally, not a sequence: the delegator's own vote wins either way (the anchor)."""
    assert tally_votes(STAKES, {DEL_2: NO, VAL_A: YES}) == tally_votes(STAKES, {VAL_A: YES, DEL_2: NO})


def test_a_delegator_of_a_silent_validator_still_counts_its_own_stake_and_the_rest_count_nothing():
    tally = tally_votes(STAKES, {DEL_3: NO_WITH_VETO})
    assert (tally.no_with_veto, tally.voted) == (30, 30)


def test_a_delegator_bonded_to_two_validators_votes_with_both_bonds():
    tally = tally_votes(STAKES, {DEL_1: ABSTAIN, VAL_A: YES, VAL_B: NO})
    assert (tally.abstain, tally.yes, tally.no) == (60, 160, 80)
    assert tally.voted == tally.total_bonded == 300


def test_a_vote_from_an_account_with_no_bonded_stake_weighs_nothing():
    assert tally_votes(STAKES, {b"Z" * 20: YES}).voted == 0


PARAMS = GovParams()  # quorum 3340, threshold 5000, veto 3340 bps; burn on veto only


def test_below_quorum_is_rejected_and_refunded_by_default_burned_when_the_param_says_so():
    tally = Tally(yes=333, total_bonded=1000)
    assert decide(tally, PARAMS).passed is False and not decide(tally, PARAMS).burn_deposits
    assert "quorum" in decide(tally, PARAMS).reason
    assert decide(tally, dataclasses.replace(PARAMS, burn_vote_quorum=1)).burn_deposits
    assert decide(Tally(yes=334, total_bonded=1000), PARAMS).passed  # exactly the quorum counts


def test_a_veto_above_its_threshold_rejects_and_burns_even_with_a_yes_majority():
    decision = decide(Tally(yes=600, no_with_veto=335, abstain=65, total_bonded=1000), PARAMS)
    assert (decision.passed, decision.burn_deposits) == (False, True) and "vetoed" in decision.reason
    at_threshold = decide(Tally(yes=666, no_with_veto=334, total_bonded=1000), PARAMS)
    assert at_threshold.passed  # the veto must be more than its threshold


def test_yes_must_be_more_than_the_threshold_of_the_non_abstaining_votes():
    assert not decide(Tally(yes=400, no=400, abstain=200, total_bonded=1000), PARAMS).passed  # exactly half
    assert decide(Tally(yes=401, no=399, abstain=200, total_bonded=1000), PARAMS).passed
    assert decide(Tally(yes=1, abstain=999, total_bonded=1000), PARAMS).passed  # abstain does not count against


def test_all_abstaining_or_no_bonded_stake_rejects_without_burning():
    for tally in (Tally(abstain=1000, total_bonded=1000), Tally()):
        decision = decide(tally, PARAMS)
        assert (decision.passed, decision.burn_deposits) == (False, False)


def test_each_active_validators_operator_votes_with_its_whole_self_bond(make_chain):
    chain = make_chain(validators=3, stakes=[10_000_000, 20_000_000, 30_000_000])
    stakes = voting_stakes(chain.state)
    assert sorted((s.stake, s.voter == s.validator) for s in stakes) == [(10_000_000, True), (20_000_000, True),
                                                                         (30_000_000, True)]
    assert {s.voter for s in stakes} == {o.address for o in chain.operators}


def test_every_delegation_votes_with_its_tokens_and_the_rounding_dust_with_the_operator(make_chain):
    """After a slash that leaves shares worth fractions of a utrl, the delegations' tokens (rounded down) plus the
    operator's dust add up to exactly the stake bonded to active validators: no bonded utrl is left out of the
    quorum's denominator, none counted twice. A jailed validator's delegations do not vote."""
    chain = make_chain(accounts=3, validators=3, stakes=[10_000_000, 10_000_000, 10_000_000])
    first, second = chain.operators[0], chain.operators[1]
    for account, amount in ((chain.accounts[0], 3_333_333), (chain.accounts[1], 1_000_001)):
        assert chain.deliver(account, MsgDelegate(validator=first.address, amount=amount)).ok
    assert chain.deliver(chain.accounts[2], MsgDelegate(validator=second.address, amount=7)).ok
    state = State(chain.kv)
    slash_validator(state, BlockContext(chain.env(chain.height)), first.address, chain.height, "test",
                    amount=1_234_567)
    jail_validator(state, chain.operators[2].address)
    chain.kv.apply(state.changes())
    assert get_validator(chain.state, first.address).stake == 14_333_334 - 1_234_567
    stakes = voting_stakes(chain.state)
    by_validator = {}
    for entry in stakes:
        by_validator[entry.validator] = by_validator.get(entry.validator, 0) + entry.stake
    assert by_validator == {v.operator: v.stake for v in active_validators(chain.state)}
    assert {s.voter for s in stakes if s.validator == first.address} == {
        first.address, chain.accounts[0].address, chain.accounts[1].address}
    assert chain.operators[2].address not in by_validator
    assert [s.stake for s in stakes if s.validator == first.address and s.voter == first.address][-1] == 1  # dust
