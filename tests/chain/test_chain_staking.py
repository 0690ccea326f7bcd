"""Staking: create, bond, unbond with its maturity, power updates for CometBFT, queries, the set-size cap."""

from __future__ import annotations

import base64

import pytest

from chain_helpers import GENESIS_BALANCE, ONE_BLOCK_WINDOWS, VALIDATOR_STAKE, test_key
from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.errors import InsufficientFunds, InvalidAmount, NotFound
from trolly.chain.app import query
from trolly.chain.block import ValidatorUpdate
from trolly.chain.proto.staking_pb2 import MsgBond, MsgCreateValidator, MsgUnbond
from trolly.chain.validators import BONDED_POOL, UNBONDING_POOL, BelowMinSelfStake, ConsensusKeyInUse
from trolly.chain.validators import InsufficientStake, InvalidConsensusKey, InvalidMoniker, LastValidator
from trolly.chain.validators import StakingParams, ValidatorExists, ValidatorNotFound, ValidatorSetFull
from trolly.chain.validators import active_validators, get_validator, operator_by_consensus_address, total_power
from trolly.chain.validators import validator_power

TRL = 10**6


def assert_fails(result, error: type) -> None:
    assert (result.code, result.codespace) == (error.code, error.codespace), result.log


def create(chain, operator, consensus, stake, moniker="new-validator", fee=0):
    return chain.deliver(operator, MsgCreateValidator(consensus_pubkey=consensus.pubkey, stake=stake, moniker=moniker), fee=fee)


# -- create ---------------------------------------------------------------------------------------------------------
def test_create_validator_bonds_stake_and_reports_power(chain):
    alice = chain.accounts[0]
    consensus = test_key("alice-consensus")
    result = create(chain, alice, consensus, 5 * TRL + 123)
    assert result.ok, result.log
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(consensus.pubkey, 5)]
    assert chain.balance(alice) == GENESIS_BALANCE - 5 * TRL - 123
    validator = get_validator(chain.state, alice.address)
    assert (validator.stake, validator.power, validator.jailed) == (5 * TRL + 123, 5, False)
    assert operator_by_consensus_address(chain.state, validator.consensus_address) == alice.address
    assert chain.query(f"/validator/{encode_address(alice.address)}") == {
        "operator": encode_address(alice.address),
        "consensus_pubkey": base64.b64encode(consensus.pubkey).decode(),
        "consensus_address": validator.consensus_address.hex().upper(),
        "stake": 5 * TRL + 123,
        "power": 5,
        "moniker": "new-validator",
        "jailed": False,
        "delegator_shares": str(5 * TRL + 123),
        "commission_rate": 1000,
        "max_rate": 2000,
        "max_change_rate": 100,
        "commission_update_height": 1,
        "details": "",
        "self_bond": 5 * TRL + 123,
        "delegators": 1,
    }
    listed = chain.query("/validators")
    assert [decode_address(v["operator"]) for v in listed] == sorted(decode_address(v["operator"]) for v in listed)
    assert {v["operator"]: v["power"] for v in listed}[encode_address(alice.address)] == 5
    assert total_power(chain.state) == 10 + 5


@pytest.mark.parametrize(
    "case,message,error",
    [
        ("consensus key of 31 bytes", MsgCreateValidator(consensus_pubkey=b"\x01" * 31, stake=TRL, moniker="x"), InvalidConsensusKey),
        ("zero stake", MsgCreateValidator(consensus_pubkey=b"\x01" * 32, stake=0, moniker="x"), InvalidAmount),
        ("empty moniker", MsgCreateValidator(consensus_pubkey=b"\x01" * 32, stake=TRL, moniker=""), InvalidMoniker),
        ("moniker too long", MsgCreateValidator(consensus_pubkey=b"\x01" * 32, stake=TRL, moniker="m" * 65), InvalidMoniker),
        ("control character", MsgCreateValidator(consensus_pubkey=b"\x01" * 32, stake=TRL, moniker="a\nb"), InvalidMoniker),
    ],
)
def test_create_validator_stateless_failures_change_nothing(chain, case, message, error):
    before = dict(chain.kv.items)
    assert_fails(chain.deliver(chain.accounts[0], message, fee=5), error)
    assert chain.kv.items == before


def test_create_validator_stateful_failures_keep_the_fee_only(chain):
    alice, bob = chain.accounts[:2]
    genesis_consensus = chain.consensus_keys[0]
    cases = [
        (lambda: create(chain, chain.operators[0], test_key("x"), TRL, fee=1), ValidatorExists),
        (lambda: create(chain, alice, genesis_consensus, TRL, fee=1), ConsensusKeyInUse),
        (lambda: create(chain, alice, test_key("a"), TRL - 1, fee=1), BelowMinSelfStake),
        (lambda: create(chain, alice, test_key("a"), GENESIS_BALANCE, fee=1), InsufficientFunds),
    ]
    for run, error in cases:
        supply = chain.query("/supply")["supply"]
        bonded = chain.balance(BONDED_POOL)
        result = run()
        assert_fails(result, error)
        assert chain.outputs[-1].validator_updates == []
        assert chain.balance(BONDED_POOL) == bonded
        assert chain.query("/supply")["supply"] == supply
    assert get_validator(chain.state, alice.address) is None
    assert chain.balance(alice) == GENESIS_BALANCE - 3  # three of the four failures were alice's, fee 1 each


def test_consensus_key_cannot_be_reused_by_another_operator(chain):
    consensus = test_key("shared")
    assert create(chain, chain.accounts[0], consensus, TRL).ok
    assert_fails(create(chain, chain.accounts[1], consensus, TRL), ConsensusKeyInUse)


def test_active_set_is_capped_by_max_validators(make_chain):
    chain = make_chain(validators=2, params={"staking": {"max_validators": 2}})
    assert_fails(create(chain, chain.accounts[0], test_key("c"), TRL), ValidatorSetFull)
    # one leaves the set (unbonds to zero power), then there is room
    assert chain.deliver(chain.operators[1], MsgUnbond(amount=VALIDATOR_STAKE)).ok
    assert create(chain, chain.accounts[0], test_key("c"), TRL).ok
    # and the one that left cannot come back while the set is full
    assert_fails(chain.deliver(chain.operators[1], MsgBond(amount=TRL)), ValidatorSetFull)


# -- bond -----------------------------------------------------------------------------------------------------------
def test_bond_adds_stake_and_reports_new_power(chain):
    operator = chain.operators[0]
    result = chain.deliver(operator, MsgBond(amount=3 * TRL))
    assert result.ok, result.log
    assert validator_power(chain.state, operator.address) == 13
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(chain.consensus_keys[0].pubkey, 13)]
    assert chain.balance(BONDED_POOL) == 13 * TRL


def test_bond_below_one_power_unit_sends_no_update(chain):
    operator = chain.operators[0]
    assert chain.deliver(operator, MsgBond(amount=TRL - 1)).ok
    assert chain.outputs[-1].validator_updates == []
    assert get_validator(chain.state, operator.address).stake == VALIDATOR_STAKE + TRL - 1
    assert chain.deliver(operator, MsgBond(amount=1)).ok  # now the stake crosses 11 TRL
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(chain.consensus_keys[0].pubkey, 11)]


def test_bond_fails_for_an_account_without_validator(chain):
    alice = chain.accounts[0]
    assert_fails(chain.deliver(alice, MsgBond(amount=TRL), fee=4), ValidatorNotFound)
    assert chain.balance(alice) == GENESIS_BALANCE - 4


def test_bond_and_unbond_in_one_block_send_no_update(chain):
    operator = chain.operators[0]
    output = chain.block(chain.tx(operator, MsgBond(amount=2 * TRL)), chain.tx(operator, MsgUnbond(amount=2 * TRL)))
    assert [r.ok for r in output.tx_results] == [True, True]
    assert output.validator_updates == []
    assert validator_power(chain.state, operator.address) == 10


def test_empty_blocks_send_no_validator_updates(chain):
    assert all(output.validator_updates == [] for output in chain.advance(3))


# -- unbond ---------------------------------------------------------------------------------------------------------
def test_unbond_drops_power_at_once_and_returns_tokens_after_exactly_unbonding_blocks(make_chain):
    chain = make_chain(params={"staking": {"unbonding_blocks": 5}, "market": ONE_BLOCK_WINDOWS})
    operator = chain.operators[0]
    balance = chain.balance(operator)
    result = chain.deliver(operator, MsgUnbond(amount=4 * TRL))
    assert result.ok, result.log
    unbond_height = chain.height
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(chain.consensus_keys[0].pubkey, 6)]
    assert chain.balance(UNBONDING_POOL) == 4 * TRL
    operator_name = encode_address(operator.address)
    assert chain.query(f"/unbonding/{operator_name}") == {
        "delegator": operator_name,
        "entries": [{"validator": operator_name, "amount": 4 * TRL, "initial_balance": 4 * TRL,
                     "creation_height": unbond_height, "maturity_height": unbond_height + 5}],
        "total": 4 * TRL,
    }
    chain.advance(4)
    assert chain.height == unbond_height + 4
    assert chain.balance(operator) == balance
    chain.block()
    assert chain.balance(operator) == balance + 4 * TRL
    assert chain.balance(UNBONDING_POOL) == 0
    assert chain.query(f"/unbonding/{operator_name}")["entries"] == []
    assert ("unbonding_complete", (("delegator", operator_name), ("validator", operator_name),
                                   ("amount", str(4 * TRL)))) in [
        (e.type, e.attributes) for e in chain.outputs[-1].events
    ]
    assert chain.outputs[-1].validator_updates == []


def test_unbonding_entries_mature_in_order_of_their_own_heights(make_chain):
    chain = make_chain(params={"staking": {"unbonding_blocks": 4}, "market": ONE_BLOCK_WINDOWS})
    operator = chain.operators[0]
    balance = chain.balance(operator)
    chain.deliver(operator, MsgUnbond(amount=1 * TRL))  # height 1 -> 5
    chain.deliver(operator, MsgUnbond(amount=2 * TRL))  # height 2 -> 6
    chain.block(chain.tx(operator, MsgUnbond(amount=100)), chain.tx(operator, MsgUnbond(amount=200)))  # 3 -> 7
    chain.block()  # height 4: nothing matures yet
    assert chain.balance(operator) == balance
    returned = []
    for _ in range(3):
        chain.block()
        returned.append(chain.balance(operator) - balance)
    assert returned == [1 * TRL, 3 * TRL, 3 * TRL + 300]


def test_unbond_more_than_the_stake_fails(chain):
    operator = chain.operators[0]
    assert_fails(chain.deliver(operator, MsgUnbond(amount=VALIDATOR_STAKE + 1)), InsufficientStake)
    assert get_validator(chain.state, operator.address).stake == VALIDATOR_STAKE


def test_unbond_by_an_account_without_validator_fails(chain):
    assert_fails(chain.deliver(chain.accounts[0], MsgUnbond(amount=1)), ValidatorNotFound)


def test_last_active_validator_cannot_unbond_to_zero_power(chain):
    operator = chain.operators[0]
    assert_fails(chain.deliver(operator, MsgUnbond(amount=VALIDATOR_STAKE)), LastValidator)
    assert chain.deliver(operator, MsgUnbond(amount=VALIDATOR_STAKE - 1 * TRL)).ok  # power 1 is fine
    assert validator_power(chain.state, operator.address) == 1


def test_unbonding_everything_removes_the_validator_from_the_set(make_chain):
    chain = make_chain(validators=2)
    leaving = chain.operators[1]
    assert chain.deliver(leaving, MsgUnbond(amount=VALIDATOR_STAKE)).ok
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(chain.consensus_keys[1].pubkey, 0)]
    assert [v.operator for v in active_validators(chain.state)] == [chain.operators[0].address]
    record = get_validator(chain.state, leaving.address)
    assert (record.stake, record.power) == (0, 0)
    # it may come back by bonding again
    assert chain.deliver(leaving, MsgBond(amount=2 * TRL)).ok
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(chain.consensus_keys[1].pubkey, 2)]


def test_stake_below_min_self_stake_means_no_power(make_chain):
    chain = make_chain(validators=2, params={"staking": {"min_self_stake": 5 * TRL}})
    operator = chain.operators[1]
    assert chain.deliver(operator, MsgUnbond(amount=6 * TRL)).ok  # 4 TRL left: below the minimum
    validator = get_validator(chain.state, operator.address)
    assert (validator.stake, validator.power) == (4 * TRL, 0)
    assert chain.outputs[-1].validator_updates == [ValidatorUpdate(chain.consensus_keys[1].pubkey, 0)]


def test_power_reduction_param_sets_the_power_scale(make_chain):
    chain = make_chain(params={"staking": {"power_reduction": 1000, "min_self_stake": 0}})
    assert chain.genesis_validator_updates == [ValidatorUpdate(chain.consensus_keys[0].pubkey, VALIDATOR_STAKE // 1000)]


# -- queries ----------------------------------------------------------------------------------------------------------
def test_validator_query_of_an_unknown_operator_is_not_found(chain):
    with pytest.raises(NotFound):
        query(chain.state, f"/validator/{encode_address(chain.accounts[0].address)}")


def test_staking_params_are_queryable_and_localnet_preset_is_short():
    assert StakingParams.localnet().unbonding_blocks < StakingParams().unbonding_blocks
    assert StakingParams.localnet().max_evidence_age_blocks <= StakingParams.localnet().unbonding_blocks


def test_genesis_staking_params_show_in_params_query(make_chain):
    chain = make_chain(params={"staking": {"unbonding_blocks": 7}, "market": ONE_BLOCK_WINDOWS})
    assert chain.query("/params/staking")["unbonding_blocks"] == 7
