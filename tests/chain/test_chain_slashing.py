"""Slashing: misbehavior evidence burns a fraction of stake (and of later unbonding), jails, and counts once."""

from __future__ import annotations

from chain_helpers import ONE_BLOCK_WINDOWS, VALIDATOR_STAKE, test_key
from trolly.chain import keys
from trolly.chain.crypto import encode_address
from trolly.chain.block import Misbehavior, ValidatorUpdate
from trolly.chain.proto.staking_pb2 import MsgBond, MsgDelegate, MsgUnbond
from trolly.chain.validators import UNBONDING_POOL, ValidatorJailed, active_validators, get_validator

TRL = 10**6


def evidence_against(consensus_key, height: int, kind: int = 1) -> Misbehavior:
    return Misbehavior(kind, consensus_key.address, 10, height, height * 10**9, 20)


def event_values(output, event_type: str) -> list[dict]:
    return [dict(e.attributes) for e in output.events if e.type == event_type]


def two_validators(make_chain, **staking):
    return make_chain(validators=2, params={"staking": {"slash_fraction_bps": 500, **staking},
                                            "market": ONE_BLOCK_WINDOWS})


def test_misbehavior_burns_the_slash_fraction_and_jails(make_chain):
    chain = two_validators(make_chain)
    supply = chain.query("/supply")["supply"]
    chain.advance(2)
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 2),))
    burned = VALIDATOR_STAKE * 500 // 10_000
    validator = get_validator(chain.state, chain.operators[1].address)
    assert (validator.stake, validator.power, validator.jailed) == (VALIDATOR_STAKE - burned, 0, True)
    assert chain.query("/supply")["supply"] == supply - burned
    assert output.validator_updates == [ValidatorUpdate(chain.consensus_keys[1].pubkey, 0)]
    assert [v.operator for v in active_validators(chain.state)] == [chain.operators[0].address]
    [slash] = event_values(output, "slash")
    assert (slash["burned_stake"], slash["infraction_height"], slash["jailed"]) == (str(burned), "2", "true")


def test_same_evidence_is_not_slashed_twice(make_chain):
    chain = two_validators(make_chain)
    evidence = evidence_against(chain.consensus_keys[1], 1)
    chain.block(misbehavior=(evidence, evidence))  # twice in one block
    stake = get_validator(chain.state, chain.operators[1].address).stake
    assert stake == VALIDATOR_STAKE - VALIDATOR_STAKE * 500 // 10_000
    output = chain.block(misbehavior=(evidence,))  # and again in the next
    assert get_validator(chain.state, chain.operators[1].address).stake == stake
    assert [s["reason"] for s in event_values(output, "slash_skipped")] == ["evidence already punished"]
    # in the first block, the duplicate was skipped as well
    assert [s["reason"] for s in event_values(chain.outputs[-2], "slash_skipped")] == ["evidence already punished"]


def test_new_evidence_against_a_tombstoned_validator_is_ignored(make_chain):
    chain = two_validators(make_chain)
    chain.advance(2)
    chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 1),))
    stake = get_validator(chain.state, chain.operators[1].address).stake
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 2),))
    assert get_validator(chain.state, chain.operators[1].address).stake == stake
    assert [s["reason"] for s in event_values(output, "slash_skipped")] == ["validator already tombstoned"]


def test_evidence_older_than_max_age_is_ignored(make_chain):
    chain = two_validators(make_chain, max_evidence_age_blocks=3)
    chain.advance(5)
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 2),))  # height 6: 4 blocks old
    assert get_validator(chain.state, chain.operators[1].address).jailed is False
    assert [s["reason"] for s in event_values(output, "slash_skipped")] == ["evidence too old"]
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 4),))  # height 7: 3 blocks old
    assert get_validator(chain.state, chain.operators[1].address).jailed is True


def test_evidence_from_the_future_is_ignored(make_chain):
    chain = two_validators(make_chain)
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 5),))
    assert get_validator(chain.state, chain.operators[1].address).jailed is False
    assert [s["reason"] for s in event_values(output, "slash_skipped")] == ["infraction height is in the future"]


def test_unknown_consensus_address_is_ignored_with_an_event(make_chain):
    chain = two_validators(make_chain)
    before = dict(chain.kv.items)
    output = chain.block(misbehavior=(evidence_against(test_key("nobody"), 1),))
    assert [s["reason"] for s in event_values(output, "slash_skipped")] == ["unknown validator"]
    assert chain.kv.items == before


def test_unbonding_after_the_infraction_is_slashed_too(make_chain):
    chain = two_validators(make_chain, unbonding_blocks=20, max_evidence_age_blocks=20)
    operator, consensus = chain.operators[1], chain.consensus_keys[1]
    chain.deliver(operator, MsgUnbond(amount=2 * TRL))  # height 1: before the infraction, untouched
    chain.advance(1)
    chain.deliver(operator, MsgUnbond(amount=4 * TRL))  # height 3: after it, slashed
    supply = chain.query("/supply")["supply"]
    output = chain.block(misbehavior=(evidence_against(consensus, 2),))
    remaining_stake = VALIDATOR_STAKE - 6 * TRL
    from_stake = remaining_stake * 500 // 10_000
    from_unbonding = 4 * TRL * 500 // 10_000
    [slash] = event_values(output, "slash")
    assert (int(slash["burned_stake"]), int(slash["burned_unbonding"])) == (from_stake, from_unbonding)
    assert chain.query("/supply")["supply"] == supply - from_stake - from_unbonding
    assert chain.balance(UNBONDING_POOL) == 6 * TRL - from_unbonding
    entries = chain.query(f"/unbonding/{_bech(operator)}")["entries"]
    assert [e["amount"] for e in entries] == [2 * TRL, 4 * TRL - from_unbonding]


def test_a_tombstoned_validator_takes_delegations_but_not_its_operators_self_bond(make_chain):
    """As in the anchor, stake may still be delegated to a jailed validator, even a tombstoned one, and gives no
    power. Its operator's MsgBond is refused: it can never unjail, so a self-bond would only lock its tokens (a
    validator jailed for downtime may bond: tests/chain/test_chain_unjail.py). What is left unbonds."""
    chain = two_validators(make_chain, unbonding_blocks=4)
    operator, delegator = chain.operators[1], chain.accounts[0]
    chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 1),))
    result = chain.deliver(operator, MsgBond(amount=TRL))
    assert (result.code, result.codespace) == (ValidatorJailed.code, "staking") and "tombstoned" in result.log
    assert chain.deliver(delegator, MsgDelegate(validator=operator.address, amount=TRL)).ok
    assert get_validator(chain.state, operator.address).power == 0
    assert chain.outputs[-1].validator_updates == []
    left = get_validator(chain.state, operator.address).stake - TRL
    balance = chain.balance(operator)
    assert chain.deliver(operator, MsgUnbond(amount=left)).ok
    assert chain.outputs[-1].validator_updates == []  # already out of the set
    chain.advance(4)
    assert chain.balance(operator) == balance + left


def test_evidence_records_are_pruned_after_the_evidence_age(make_chain):
    chain = two_validators(make_chain, max_evidence_age_blocks=2)
    chain.block(misbehavior=(evidence_against(chain.consensus_keys[1], 1),))
    assert any(k.startswith(keys.SLASHED_EVIDENCE) for k in chain.kv.items)
    chain.advance(3)
    assert not any(k.startswith(keys.SLASHED_EVIDENCE) for k in chain.kv.items)


def _bech(key) -> str:
    return encode_address(key.address)


def test_the_last_active_validator_is_not_jailed(chain):
    """CometBFT halts on an empty validator set; a lone validator's evidence is skipped instead."""
    supply = chain.query("/supply")["supply"]
    output = chain.block(misbehavior=(evidence_against(chain.consensus_keys[0], 1),))
    assert [s["reason"] for s in event_values(output, "slash_skipped")] == ["last active validator"]
    assert get_validator(chain.state, chain.operators[0].address).jailed is False
    assert chain.query("/supply")["supply"] == supply


def test_evidence_against_every_validator_in_one_block_leaves_one_active(make_chain):
    chain = two_validators(make_chain)
    output = chain.block(misbehavior=tuple(evidence_against(k, 1) for k in chain.consensus_keys))
    assert len(event_values(output, "slash")) == 1
    assert len(active_validators(chain.state)) == 1
