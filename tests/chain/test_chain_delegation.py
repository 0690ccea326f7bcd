"""Delegation: delegate, undelegate, redelegate, withdraw rewards, commission and edits, slashes that reach every
delegator in proportion, and the bad input CheckTx refuses with its own code, changing nothing."""

from __future__ import annotations

import pytest

from chain_helpers import GENESIS_BALANCE, VALIDATOR_STAKE, test_key
from trolly.chain import app as chain_app
from trolly.chain.block import Misbehavior
from trolly.chain.crypto import encode_address
from trolly.chain.delegations import get_delegation
from trolly.chain.errors import InsufficientFunds, InvalidAmount
from trolly.chain.proto.distribution_pb2 import MsgWithdrawRewards
from trolly.chain.proto.staking_pb2 import MsgCreateValidator, MsgDelegate, MsgEditValidator, MsgRedelegate
from trolly.chain.proto.staking_pb2 import MsgUndelegate
from trolly.chain.rewards import community_pool, outstanding
from trolly.chain.state import State
from trolly.chain.tx import build_tx
from trolly.chain.validators import BONDED_POOL, UNBONDING_POOL, CommissionAboveMax, CommissionChangeTooLarge
from trolly.chain.validators import CommissionChangeTooSoon, DelegationNotFound, InsufficientDelegation
from trolly.chain.validators import InvalidCommission, InvalidValidatorAddress, SelfRedelegation, TooManyEntries
from trolly.chain.validators import TransitiveRedelegation, ValidatorNotFound, get_validator

TRL = 10**6
PARAMS = {"staking": {"unbonding_blocks": 5, "commission_change_blocks": 3, "max_evidence_age_blocks": 5},
          "market": {"verification_window": 1, "reveal_window": 1}}


def two_validators(make_chain):
    return make_chain(validators=2, params=PARAMS)


def delegation_amount(chain, who, operator) -> int:
    rows = chain.query(f"/delegations/{encode_address(who.address)}")["delegations"]
    return next((r["amount"] for r in rows if r["validator"] == encode_address(operator.address)), 0)


def pending(chain, who) -> int:
    return chain.query(f"/rewards/{encode_address(who.address)}")["total"]


def fees(chain, amount: int):
    payer = chain.accounts[3]
    return chain.block(chain.tx(payer, MsgDelegate(validator=chain.operators[0].address, amount=1), fee=amount))


# -- delegate, undelegate ------------------------------------------------------------------------------------------
def test_delegation_adds_to_the_validators_stake_and_power(chain):
    alice, operator = chain.accounts[0], chain.operators[0]
    result = chain.deliver(alice, MsgDelegate(validator=operator.address, amount=5 * TRL))
    assert result.ok, result.log
    validator = get_validator(chain.state, operator.address)
    assert (validator.stake, validator.power) == (VALIDATOR_STAKE + 5 * TRL, 15)
    assert chain.balance(alice) == GENESIS_BALANCE - 5 * TRL
    assert delegation_amount(chain, alice, operator) == 5 * TRL
    answer = chain.query(f"/validator/{encode_address(operator.address)}")
    assert (answer["self_bond"], answer["delegators"]) == (VALIDATOR_STAKE, 2)


def test_undelegated_tokens_return_to_the_delegator_after_the_unbonding_period(make_chain):
    chain = two_validators(make_chain)
    alice, operator = chain.accounts[0], chain.operators[0]
    chain.deliver(alice, MsgDelegate(validator=operator.address, amount=5 * TRL))
    assert chain.deliver(alice, MsgUndelegate(validator=operator.address, amount=2 * TRL)).ok
    assert get_validator(chain.state, operator.address).power == 13
    assert chain.balance(UNBONDING_POOL) == 2 * TRL
    balance = chain.balance(alice)
    chain.advance(4)
    assert chain.balance(alice) == balance
    chain.advance(1)
    assert chain.balance(alice) == balance + 2 * TRL and chain.balance(UNBONDING_POOL) == 0


def test_undelegating_everything_removes_the_delegation(chain):
    alice, operator = chain.accounts[0], chain.operators[0]
    chain.deliver(alice, MsgDelegate(validator=operator.address, amount=3 * TRL))
    assert chain.deliver(alice, MsgUndelegate(validator=operator.address, amount=3 * TRL)).ok
    assert get_delegation(chain.state, alice.address, operator.address) is None


def test_unbonding_entries_per_pair_are_limited(make_chain):
    chain = make_chain(params={**PARAMS, "staking": {**PARAMS["staking"], "max_entries": 2}})
    alice, operator = chain.accounts[0], chain.operators[0]
    chain.deliver(alice, MsgDelegate(validator=operator.address, amount=3 * TRL))
    assert chain.deliver(alice, MsgUndelegate(validator=operator.address, amount=1)).ok
    assert chain.deliver(alice, MsgUndelegate(validator=operator.address, amount=1)).ok
    result = chain.deliver(alice, MsgUndelegate(validator=operator.address, amount=1))
    assert (result.code, result.codespace) == (TooManyEntries.code, "staking")


# -- rewards and commission ----------------------------------------------------------------------------------------
def test_fees_reach_the_operator_as_commission_then_each_delegator_by_its_stake(chain):
    """One validator of 10 TRL (self-bond) plus alice's 30 TRL: of 1000 utrl of fees, 10% commission, then 900
    split 1:3 between the operator and alice, lazily (the block credits one record, not two)."""
    alice, operator = chain.accounts[0], chain.operators[0]
    chain.deliver(alice, MsgDelegate(validator=operator.address, amount=30 * TRL))
    operator_balance = chain.balance(operator)
    chain.block(chain.tx(chain.accounts[1], MsgDelegate(validator=operator.address, amount=1), fee=999))
    # the block's own MsgDelegate (1 utrl from account 1) joins before the fees are credited
    assert chain.balance(operator) == operator_balance + 99
    assert pending(chain, alice) == 900 * 30 * TRL // (40 * TRL + 1)
    assert pending(chain, operator) == 900 * 10 * TRL // (40 * TRL + 1)
    before = chain.balance(alice)
    result = chain.deliver(alice, MsgWithdrawRewards(validator=operator.address))
    assert result.ok
    assert chain.balance(alice) == before + 900 * 30 * TRL // (40 * TRL + 1)
    assert pending(chain, alice) == 0


def test_a_new_delegation_earns_nothing_of_the_rewards_before_it(chain):
    alice, operator = chain.accounts[0], chain.operators[0]
    fees(chain, 1000)
    operator_pending = pending(chain, operator)
    chain.deliver(alice, MsgDelegate(validator=operator.address, amount=10 * TRL))
    assert pending(chain, alice) == 0 and pending(chain, operator) == operator_pending


def test_the_last_delegation_leaving_sends_the_rounding_dust_to_the_community_pool(make_chain):
    chain = two_validators(make_chain)
    operator = chain.operators[1]
    fees(chain, 333)
    credited = outstanding(chain.state, operator.address)
    output = chain.block(chain.tx(operator, MsgUndelegate(validator=operator.address, amount=VALIDATOR_STAKE)))
    [paid] = [int(dict(e.attributes)["amount"]) for e in output.tx_results[0].events if e.type == "withdraw_rewards"]
    assert outstanding(chain.state, operator.address) == 0
    assert community_pool(chain.state) == credited - paid and 0 <= credited - paid < 1  # one withdrawal


def test_edit_validator_changes_commission_within_its_bounds(make_chain):
    chain = two_validators(make_chain)
    operator = chain.operators[0]
    chain.advance(3)
    assert chain.deliver(operator, MsgEditValidator(commission_rate=1_100, moniker="renamed", details="hi")).ok
    validator = get_validator(chain.state, operator.address)
    assert (validator.commission.rate, validator.moniker, validator.details) == (1_100, "renamed", "hi")
    assert validator.commission_update_height == chain.height


def test_create_validator_with_its_own_commission_terms(chain):
    alice = chain.accounts[0]
    message = MsgCreateValidator(consensus_pubkey=test_key("c").pubkey, stake=TRL, moniker="m", commission_rate=0,
                                 max_rate=500, max_change_rate=50, details="hello")
    assert chain.deliver(alice, message).ok
    commission = get_validator(chain.state, alice.address).commission
    assert (commission.rate, commission.max_rate, commission.max_change_rate) == (0, 500, 50)


@pytest.mark.parametrize("rate,max_rate,max_change", [(600, 500, 10), (0, 10_001, 0), (0, 100, 200)])
def test_create_validator_refuses_commission_terms_out_of_range(chain, rate, max_rate, max_change):
    message = MsgCreateValidator(consensus_pubkey=test_key("c").pubkey, stake=TRL, moniker="m",
                                 commission_rate=rate, max_rate=max_rate, max_change_rate=max_change)
    result = chain.deliver(chain.accounts[0], message)
    assert (result.code, result.codespace) == (InvalidCommission.code, "staking")


# -- bad input, refused in CheckTx with its own code ------------------------------------------------------------------
def check(chain, key, message):
    """CheckTx against the committed state: its result, and whether it changed anything."""
    state = State(chain.kv)
    raw = build_tx(key, chain.chain_id, chain.nonce(key), 0, [message])
    result = chain_app.check_tx(state, chain.env(chain.height + 1), raw)
    return result, state.changes()


def bad_inputs(chain):
    alice, operator = chain.accounts[0], chain.operators[0]
    stranger = test_key("not-a-validator").address
    return [
        ("delegate to a non-validator", alice, MsgDelegate(validator=stranger, amount=TRL), ValidatorNotFound),
        ("delegate more than the balance", alice, MsgDelegate(validator=operator.address, amount=GENESIS_BALANCE + 1),
         InsufficientFunds),
        ("delegate zero", alice, MsgDelegate(validator=operator.address, amount=0), InvalidAmount),
        ("delegate to a 19-byte address", alice, MsgDelegate(validator=b"\x01" * 19, amount=1),
         InvalidValidatorAddress),
        ("undelegate more than delegated", alice, MsgUndelegate(validator=operator.address, amount=2 * TRL + 1),
         InsufficientDelegation),
        ("undelegate without a delegation", chain.accounts[1], MsgUndelegate(validator=operator.address, amount=1),
         DelegationNotFound),
        ("redelegate to the same validator", alice, MsgRedelegate(src_validator=operator.address,
                                                                  dst_validator=operator.address, amount=1),
         SelfRedelegation),
        ("redelegate more than delegated", alice, MsgRedelegate(src_validator=operator.address,
                                                                dst_validator=chain.operators[1].address,
                                                                amount=2 * TRL + 1), InsufficientDelegation),
        ("commission above max_rate", operator, MsgEditValidator(commission_rate=2_001), CommissionAboveMax),
        ("commission faster than max_change_rate", operator, MsgEditValidator(commission_rate=1_101),
         CommissionChangeTooLarge),
        ("withdraw without a delegation", chain.accounts[1], MsgWithdrawRewards(validator=operator.address),
         DelegationNotFound),
    ]


def test_bad_input_is_refused_in_check_tx_with_its_own_code_and_changes_nothing(make_chain):
    chain = two_validators(make_chain)
    chain.deliver(chain.accounts[0], MsgDelegate(validator=chain.operators[0].address, amount=2 * TRL))
    chain.advance(3)
    seen = set()
    for case, key, message, error in bad_inputs(chain):
        result, changes = check(chain, key, message)
        assert (result.code, result.codespace) == (error.code, error.codespace), (case, result.log)
        assert result.log and changes == {}, case
        seen.add((error.codespace, error.code))
    # each kind of fault its own code (undelegating and redelegating too much share one, as do the two absences)
    assert len(seen) == 9


def test_a_commission_change_too_soon_after_the_last_is_refused(make_chain):
    chain = two_validators(make_chain)
    chain.advance(3)
    operator = chain.operators[0]
    assert chain.deliver(operator, MsgEditValidator(commission_rate=1_050)).ok
    result, changes = check(chain, operator, MsgEditValidator(commission_rate=1_100))
    assert (result.code, result.codespace) == (CommissionChangeTooSoon.code, "staking") and changes == {}
    assert "next change is allowed from height" in result.log


# -- redelegation ------------------------------------------------------------------------------------------------------
def test_redelegation_moves_stake_at_once_and_cannot_move_on_before_it_matures(make_chain):
    chain = make_chain(validators=3, params=PARAMS)
    alice = chain.accounts[0]
    a, b, c = (o.address for o in chain.operators)
    chain.deliver(alice, MsgDelegate(validator=a, amount=4 * TRL))
    assert chain.deliver(alice, MsgRedelegate(src_validator=a, dst_validator=b, amount=3 * TRL)).ok
    assert delegation_amount(chain, alice, chain.operators[0]) == TRL
    assert delegation_amount(chain, alice, chain.operators[1]) == 3 * TRL
    assert chain.balance(BONDED_POOL) == 3 * VALIDATOR_STAKE + 4 * TRL
    result = chain.deliver(alice, MsgRedelegate(src_validator=b, dst_validator=c, amount=TRL))
    assert (result.code, result.codespace) == (TransitiveRedelegation.code, "staking")
    chain.advance(5)
    assert chain.query(f"/redelegations/{encode_address(alice.address)}")["entries"] == []
    assert chain.deliver(alice, MsgRedelegate(src_validator=b, dst_validator=c, amount=TRL)).ok


# -- slashing reaches delegators --------------------------------------------------------------------------------------
def evidence(chain, index: int, height: int) -> Misbehavior:
    return Misbehavior(1, chain.consensus_keys[index].address, 10, height, 0, 20)


def test_a_double_sign_slashes_every_delegator_in_proportion_and_unbonding_since_the_infraction(make_chain):
    """Alice delegated 10 TRL; bob delegated 10 TRL and undelegated 5 after the infraction: the 5% slash takes 5%
    of the operator's, alice's and bob's bonded stake, and of bob's unbonding entry."""
    chain = two_validators(make_chain)
    alice, bob = chain.accounts[:2]
    target = chain.operators[1]
    chain.deliver(alice, MsgDelegate(validator=target.address, amount=10 * TRL))
    chain.deliver(bob, MsgDelegate(validator=target.address, amount=10 * TRL))
    infraction = chain.height
    chain.deliver(bob, MsgUndelegate(validator=target.address, amount=5 * TRL))
    chain.block(misbehavior=(evidence(chain, 1, infraction),))
    validator = get_validator(chain.state, target.address)
    assert validator.jailed and validator.stake == 25 * TRL * 95 // 100
    assert delegation_amount(chain, alice, target) == 10 * TRL * 95 // 100
    assert delegation_amount(chain, bob, target) == 5 * TRL * 95 // 100
    assert delegation_amount(chain, target, target) == VALIDATOR_STAKE * 95 // 100
    assert chain.query(f"/unbonding/{encode_address(bob.address)}")["total"] == 5 * TRL * 95 // 100


def test_a_double_sign_reaches_stake_redelegated_away_after_the_infraction(make_chain):
    chain = make_chain(validators=3, params=PARAMS)
    alice = chain.accounts[0]
    source, destination = chain.operators[1], chain.operators[2]
    chain.deliver(alice, MsgDelegate(validator=source.address, amount=10 * TRL))
    infraction = chain.height
    chain.deliver(alice, MsgRedelegate(src_validator=source.address, dst_validator=destination.address,
                                       amount=10 * TRL))
    chain.block(misbehavior=(evidence(chain, 1, infraction),))
    assert delegation_amount(chain, alice, destination) == 10 * TRL * 95 // 100
    assert get_validator(chain.state, destination.address).stake == VALIDATOR_STAKE + 10 * TRL * 95 // 100
    assert not get_validator(chain.state, destination.address).jailed


def test_a_redelegation_made_before_the_infraction_is_not_slashed(make_chain):
    chain = make_chain(validators=3, params=PARAMS)
    alice = chain.accounts[0]
    source, destination = chain.operators[1], chain.operators[2]
    chain.deliver(alice, MsgDelegate(validator=source.address, amount=10 * TRL))
    chain.deliver(alice, MsgRedelegate(src_validator=source.address, dst_validator=destination.address,
                                       amount=10 * TRL))
    chain.advance(1)
    chain.block(misbehavior=(evidence(chain, 1, chain.height),))
    assert delegation_amount(chain, alice, destination) == 10 * TRL


def test_slashing_a_validator_leaves_its_pending_rewards_whole(chain):
    """Rewards are per share, and a slash changes tokens, not shares: what a delegation earned stays earned."""
    alice, operator = chain.accounts[0], chain.operators[0]
    chain.deliver(alice, MsgDelegate(validator=operator.address, amount=10 * TRL))
    fees(chain, 10_000)
    earned = pending(chain, alice)
    from trolly.chain.block import BlockContext
    from trolly.chain.slash import slash_validator
    state = State(chain.kv)
    slash_validator(state, BlockContext(chain.env(chain.height)), operator.address, chain.height, "test",
                    fraction_bps=5_000)
    chain.kv.apply(state.changes())
    assert pending(chain, alice) == earned and community_pool(chain.state) == 0
