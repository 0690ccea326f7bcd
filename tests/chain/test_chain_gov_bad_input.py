"""Bad governance input (issue 35): each refused in CheckTx with its own code in the "gov" codespace and a log
that says what is wrong, with nothing written. Every one of these messages is unknown on main."""

from __future__ import annotations

import pytest

from gov_helpers import MIN_DEPOSIT, SHORT_GOV, YES, Gov, proposal_message, refused_in_check_tx
from trolly.chain.gov.errors import InitialDepositTooLow, InvalidParamValue, InvalidProposal, InvalidVoteOption
from trolly.chain.gov.errors import NotInVotingPeriod, ParamNotGovernable, ParamRuleBroken, ProposalClosed
from trolly.chain.gov.errors import ProposalNotFound, UnknownParam
from trolly.chain.proto import gov_pb2


@pytest.fixture
def gov(make_chain):
    return Gov(make_chain(accounts=3, validators=2, params={"gov": SHORT_GOV}))


def assert_refused(gov, error, log_part: str, *messages, signer=None) -> None:
    result = refused_in_check_tx(gov.chain, signer or gov.proposer, *messages)
    assert (result.codespace, result.code) == ("gov", error.code), result.log
    assert log_part in result.log, result.log


@pytest.mark.parametrize("section, key, log_part", [
    ("market", "no_such_param", "has no param 'no_such_param'"),
    ("banking", "min_fee", "unknown params section 'banking'"),
])
def test_a_proposal_naming_an_unknown_param_is_refused(gov, section, key, log_part):
    assert_refused(gov, UnknownParam, log_part, proposal_message((section, key, 5)))


@pytest.mark.parametrize("value, log_part", [
    ("10001", "within 0..10000"), ("-1", "outside 0..18446744073709551615"), ("18446744073709551616", "outside"),
    ("1.5", "not an integer"), ("true", "not an integer"), ('"300"', "not an integer"), ("abc", "not JSON"),
    ("", "not JSON"),
])
def test_a_proposal_with_a_wrong_or_out_of_range_value_is_refused(gov, value, log_part):
    assert_refused(gov, InvalidParamValue, log_part, proposal_message(("market", "validator_fee_bps", value)))


@pytest.mark.parametrize("section, key, value, log_part", [
    ("staking", "max_entries", 0, "staking.max_entries must be at least 1"),
    ("slashing", "signed_blocks_window", 0, "signed_blocks_window"),
])
def test_delegation_and_downtime_params_out_of_range_are_refused(gov, section, key, value, log_part):
    """The sections the delegation and downtime branches added are checked by their own ranges too."""
    assert_refused(gov, InvalidParamValue, log_part, proposal_message((section, key, value)))


def test_a_threshold_no_proposal_could_ever_pass_again_is_refused(gov):
    """An attack on governance itself: yes can never be more than 100 % of the votes, so a threshold of 10000
    would freeze every param for good, the threshold included."""
    assert_refused(gov, InvalidParamValue, "no proposal could pass again",
                   proposal_message(("gov", "threshold_bps", 10_000)))


def test_a_param_fixed_at_genesis_cannot_be_proposed(gov):
    assert_refused(gov, ParamNotGovernable, "staking.power_reduction is fixed at genesis",
                   proposal_message(("staking", "power_reduction", 1_000)))


def test_a_proposal_breaking_a_cross_param_rule_only_with_all_its_changes_is_refused(gov):
    """Each change alone keeps the unbonding longer than the longest reveal wait; both together do not."""
    window, unbonding = ("market", "verification_window", 1_000), ("staking", "unbonding_blocks", 300)
    for alone in (window, unbonding):
        assert gov.chain.deliver(gov.proposer, proposal_message(alone, deposit=0)).ok
    assert_refused(gov, ParamRuleBroken, "staking.unbonding_blocks (300) must be more than",
                   proposal_message(window, unbonding))


def test_a_malformed_proposal_is_refused(gov):
    assert_refused(gov, InvalidProposal, "changed twice",
                   proposal_message(("market", "reveal_window", 11), ("market", "reveal_window", 12)))
    assert_refused(gov, InvalidProposal, "title", proposal_message(title=""))
    assert_refused(gov, InvalidProposal, "control characters", proposal_message(title="a\x1b[2Jb"))
    assert_refused(gov, InvalidProposal, "lowercase words", proposal_message(("Market", "reveal_window", 11)))


def test_an_initial_deposit_below_the_required_share_is_refused(make_chain):
    gov = Gov(make_chain(validators=1, params={"gov": {**SHORT_GOV, "min_initial_deposit_bps": 2_500}}))
    assert_refused(gov, InitialDepositTooLow, f"below {MIN_DEPOSIT // 4}utrl",
                   proposal_message(deposit=MIN_DEPOSIT // 4 - 1))


def test_voting_outside_the_voting_period_is_refused(gov):
    chain = gov.chain
    waiting = gov.submit(deposit=MIN_DEPOSIT // 2)
    assert_refused(gov, NotInVotingPeriod, "have not reached gov.min_deposit",
                   gov_pb2.MsgVote(proposal_id=waiting, option=YES), signer=chain.operators[0])
    decided = gov.submit()
    gov.vote_all(decided, YES)
    gov.finish(decided)
    assert_refused(gov, NotInVotingPeriod, "already decided (passed)",
                   gov_pb2.MsgVote(proposal_id=decided, option=YES), signer=chain.operators[0])
    assert_refused(gov, ProposalNotFound, "no proposal 99", gov_pb2.MsgVote(proposal_id=99, option=YES))


def test_a_vote_with_no_known_option_is_refused(gov):
    proposal_id = gov.submit()
    for option in (0, 5, 1_000):
        assert_refused(gov, InvalidVoteOption, f"vote option {option} is not one of",
                       gov_pb2.MsgVote(proposal_id=proposal_id, option=option))


def test_a_deposit_to_a_missing_deleted_or_decided_proposal_is_refused(gov):
    chain = gov.chain
    assert_refused(gov, ProposalNotFound, "no proposal 7", gov_pb2.MsgDeposit(proposal_id=7, amount=5))
    dropped = gov.submit(deposit=1)
    gov.finish(dropped)  # deleted when its deposit period ended short of the minimum
    assert_refused(gov, ProposalNotFound, f"no proposal {dropped}", gov_pb2.MsgDeposit(proposal_id=dropped, amount=5))
    decided = gov.submit()
    gov.vote_all(decided, YES)
    gov.finish(decided)
    assert chain.query(f"/gov/proposal/{decided}")["status"] == "passed"
    assert_refused(gov, ProposalClosed, "takes no more deposits", gov_pb2.MsgDeposit(proposal_id=decided, amount=5))


def test_every_gov_error_has_its_own_code_in_the_block_120_to_139():
    from trolly.abci_app.codes import registered_codes

    codes = [code for (codespace, code) in registered_codes() if codespace == "gov"]
    assert len(codes) == len(set(codes)) >= 11 and all(120 <= code <= 139 for code in codes)
