"""MsgUnjail: the operator brings a validator jailed for downtime back after its jail time; every other case is
refused in CheckTx and in the block with its own code, and changes nothing but the fee and nonce."""

from __future__ import annotations

from chain_helpers import VALIDATOR_STAKE
from trolly.chain.app import check_tx
from trolly.chain.block import Misbehavior, ValidatorUpdate
from trolly.chain.proto.slashing_pb2 import MsgUnjail
from trolly.chain.proto.staking_pb2 import MsgBond, MsgDelegate
from trolly.chain.signing_info import JailTimeRemains, SelfStakeTooLowToUnjail, ValidatorNotJailed
from trolly.chain.signing_info import ValidatorTombstoned, get_signing_info
from trolly.chain.state import State
from trolly.chain.validators import ValidatorNotFound, get_validator, validator_self_bond

JAIL = 20
LIVENESS = {"signed_blocks_window": 10, "min_signed_per_window_bps": 5_000, "downtime_jail_blocks": JAIL,
            "slash_fraction_downtime_bps": 100}


def evidence_against(consensus_key, height: int) -> Misbehavior:
    """A duplicate vote at `height` (power figures are not read by the chain)."""
    return Misbehavior(1, consensus_key.address, 10, height, height * 10**9, 40)


def jailed_for_downtime(make_chain, **staking):
    """Four validators; validator 3 stopped signing and was jailed at the chain's current height."""
    chain = make_chain(validators=4, params={"slashing": LIVENESS, "staking": staking})
    chain.advance(10, last_commit=chain.commit_of([0, 1, 2]))
    assert get_validator(chain.state, chain.operators[3].address).jailed
    return chain


def refused(chain, key, error) -> None:
    """`MsgUnjail` from `key` fails with `error` in CheckTx and in a block, changing only fee and nonce."""
    alone = chain.tx(key, MsgUnjail(), nonce=chain.nonce(key))
    checked = check_tx(State(chain.kv), chain.env(chain.height + 1), alone)
    assert (checked.code, checked.codespace) == (error.code, error.codespace), checked.log
    before = get_validator(chain.state, key.address)
    result = chain.block(chain.tx(key, MsgUnjail(), fee=5), last_commit=chain.commit_of([0, 1, 2])).tx_results[0]
    assert (result.code, result.codespace) == (error.code, error.codespace), result.log
    assert result.log and get_validator(chain.state, key.address) == before


def test_unjailing_before_the_jail_time_has_passed_is_refused_with_the_blocks_left(make_chain):
    chain = jailed_for_downtime(make_chain)
    until = get_signing_info(chain.state, chain.consensus_keys[3].address).jailed_until
    assert until == chain.height + JAIL
    refused(chain, chain.operators[3], JailTimeRemains)
    result = chain.block(chain.tx(chain.operators[3], MsgUnjail())).tx_results[0]
    assert f"jailed until height {until}" in result.log


def test_unjailing_after_the_jail_time_restores_power_and_starts_a_fresh_window(make_chain):
    chain = jailed_for_downtime(make_chain)
    until = get_signing_info(chain.state, chain.consensus_keys[3].address).jailed_until
    chain.advance(until - chain.height - 1, last_commit=chain.commit_of([0, 1, 2]))
    output = chain.block(chain.tx(chain.operators[3], MsgUnjail()), last_commit=chain.commit_of([0, 1, 2]))
    assert output.tx_results[0].ok, output.tx_results[0].log
    stake = VALIDATOR_STAKE - VALIDATOR_STAKE * 100 // 10_000
    validator = get_validator(chain.state, chain.operators[3].address)
    assert (validator.jailed, validator.stake, validator.power) == (False, stake, stake // 10**6)
    assert output.validator_updates == [ValidatorUpdate(chain.consensus_keys[3].pubkey, stake // 10**6)]
    info = get_signing_info(chain.state, chain.consensus_keys[3].address)
    assert (info.start_height, info.index_offset, info.missed_blocks_counter) == (until, 0, 0)
    # Back in the set, it is judged again only after a whole window: signing from now on keeps it out of jail.
    chain.advance(30, last_commit=chain.commit_of([0, 1, 2, 3]))
    assert not get_validator(chain.state, chain.operators[3].address).jailed


def test_a_tombstoned_validator_can_never_unjail(make_chain):
    chain = make_chain(validators=2, params={"slashing": LIVENESS})
    chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 1),))
    chain.advance(JAIL + 1)
    refused(chain, chain.operators[1], ValidatorTombstoned)


def test_a_double_sign_is_not_shielded_by_a_downtime_jail(make_chain):
    """Attack: a validator that double-signed goes offline so that it is jailed for downtime before the evidence
    lands, hoping evidence against a jailed validator is ignored and it can unjail after a short jail. The
    evidence still slashes it at the double-sign fraction and tombstones it."""
    chain = jailed_for_downtime(make_chain)
    stake = get_validator(chain.state, chain.operators[3].address).stake
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[3], chain.height - 2),))
    [slash] = [dict(e.attributes) for e in output.events if e.type == "slash"]
    assert int(slash["burned_stake"]) == stake * 500 // 10_000  # staking.slash_fraction_bps, the default
    assert get_signing_info(chain.state, chain.consensus_keys[3].address).tombstoned
    chain.advance(JAIL + 1)
    refused(chain, chain.operators[3], ValidatorTombstoned)


def test_unjailing_a_validator_that_is_not_jailed_is_refused(make_chain):
    chain = jailed_for_downtime(make_chain)
    refused(chain, chain.operators[0], ValidatorNotJailed)


def test_unjailing_without_a_validator_is_refused(make_chain):
    chain = jailed_for_downtime(make_chain)
    refused(chain, chain.accounts[0], ValidatorNotFound)


def test_unjailing_below_the_minimum_self_stake_is_refused_until_the_operator_bonds_back_up(make_chain):
    """The downtime slash took 1% of a stake that was exactly the minimum: the operator bonds the difference
    (allowed while jailed for downtime) and then unjails."""
    chain = jailed_for_downtime(make_chain, min_self_stake=VALIDATOR_STAKE)
    chain.advance(JAIL, last_commit=chain.commit_of([0, 1, 2]))
    refused(chain, chain.operators[3], SelfStakeTooLowToUnjail)
    short = VALIDATOR_STAKE - get_validator(chain.state, chain.operators[3].address).stake
    assert chain.deliver(chain.operators[3], MsgBond(amount=short)).ok
    assert get_validator(chain.state, chain.operators[3].address).power == 0  # still jailed
    assert chain.deliver(chain.operators[3], MsgUnjail()).ok
    assert get_validator(chain.state, chain.operators[3].address).power == VALIDATOR_STAKE // 10**6


def test_delegations_do_not_count_towards_the_minimum_self_stake_to_unjail(make_chain):
    """The check reads the operator's own delegation (`validator_self_bond`), not the validator's whole stake:
    delegators who bring the stake far above the minimum do not let an operator with too little of its own back
    into the set (it would have no power anyway), until it bonds back up itself."""
    chain = jailed_for_downtime(make_chain, min_self_stake=VALIDATOR_STAKE)
    operator = chain.operators[3]
    assert chain.deliver(chain.accounts[0], MsgDelegate(validator=operator.address, amount=50 * VALIDATOR_STAKE)).ok
    chain.advance(JAIL, last_commit=chain.commit_of([0, 1, 2]))
    validator = get_validator(chain.state, operator.address)
    assert validator.stake > VALIDATOR_STAKE > validator_self_bond(chain.state, validator)
    refused(chain, operator, SelfStakeTooLowToUnjail)
    short = VALIDATOR_STAKE - validator_self_bond(chain.state, get_validator(chain.state, operator.address))
    assert chain.deliver(operator, MsgBond(amount=short + 1)).ok
    assert chain.deliver(operator, MsgUnjail()).ok
    unjailed = get_validator(chain.state, operator.address)
    assert unjailed.power == unjailed.stake // 10**6 > 50
