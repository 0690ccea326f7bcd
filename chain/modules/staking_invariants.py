"""Staking invariants: the pools hold exactly what the records say, shares add up, powers are what they should
be and CometBFT was told. Run after every test block (`tests/conftest.py`), never in a node's block path."""

from __future__ import annotations

from .. import keys
from ..accounts import get_balance
from ..crypto import encode_address
from ..delegations import iterate_delegations
from ..module import InvariantBroken
from ..state import State
from ..unbonding import iterate_redelegations, iterate_unbonding_entries
from ..validators import BONDED_POOL, UNBONDING_POOL, compute_power, get_last_power, iterate_validators
from ..validators import staking_params, validator_self_bond


def check_bonded_pool(state: State) -> None:
    """The bonded pool holds exactly the validators' stakes."""
    staked = sum(v.stake for v in iterate_validators(state))
    if get_balance(state, BONDED_POOL) != staked:
        raise InvariantBroken(f"bonded pool {get_balance(state, BONDED_POOL)} != sum of stakes {staked}")


def check_delegator_shares(state: State) -> None:
    """Each validator's delegator_shares is the sum of its delegations' shares; every index matches a record;
    a validator with no shares has no stake (its last delegator took everything)."""
    shares: dict[bytes, int] = {}
    count = 0
    for delegation in iterate_delegations(state):
        if delegation.shares <= 0:
            raise InvariantBroken("a stored delegation holds no shares")
        shares[delegation.validator] = shares.get(delegation.validator, 0) + delegation.shares
        count += 1
    for validator in iterate_validators(state):
        name = encode_address(validator.operator)
        if shares.pop(validator.operator, 0) != validator.delegator_shares:
            raise InvariantBroken(f"validator {name}: delegator_shares differ from its delegations' sum")
        if validator.delegator_shares == 0 and validator.stake != 0:
            raise InvariantBroken(f"validator {name}: {validator.stake}utrl of stake and no shares")
    if shares:
        raise InvariantBroken("delegations to validators that do not exist")
    if sum(1 for _ in state.iterate(keys.DELEGATION_BY_VALIDATOR)) != count:
        raise InvariantBroken("the delegation index does not match the delegations")


def check_unbonding_pool(state: State) -> None:
    """The unbonding pool holds exactly the unbonding entries, and both indexes match them."""
    entries = list(iterate_unbonding_entries(state))
    total = sum(e.amount for e in entries)
    if get_balance(state, UNBONDING_POOL) != total:
        raise InvariantBroken(f"unbonding pool {get_balance(state, UNBONDING_POOL)} != sum of entries {total}")
    by_validator = sum(1 for _ in state.iterate(keys.UNBONDING_BY_OPERATOR))
    by_delegator = sum(1 for _ in state.iterate(keys.UNBONDING_BY_DELEGATOR))
    if not by_validator == by_delegator == len(entries) or any(e.amount == 0 for e in entries):
        raise InvariantBroken(f"unbonding indexes hold {by_validator} and {by_delegator} keys for {len(entries)} "
                              f"entries (or an entry is empty)")


def check_redelegation_indexes(state: State) -> None:
    entries = sum(1 for _ in iterate_redelegations(state))
    by_source = sum(1 for _ in state.iterate(keys.REDELEGATION_BY_SOURCE))
    by_delegator = sum(1 for _ in state.iterate(keys.REDELEGATION_BY_DELEGATOR))
    if not entries == by_source == by_delegator:
        raise InvariantBroken(f"{entries} redelegations, indexes of {by_source} and {by_delegator} keys")


def check_validator_power(state: State) -> None:
    """power == stake // power_reduction (0 when jailed or the self-bond is below min); the indexes agree."""
    params = staking_params(state)
    active = {key[len(keys.ACTIVE_VALIDATOR):] for key, _ in state.iterate(keys.ACTIVE_VALIDATOR)}
    pending = {key[len(keys.VALIDATOR_POWER_CHANGED):] for key, _ in state.iterate(keys.VALIDATOR_POWER_CHANGED)}
    count = 0
    for validator in iterate_validators(state):
        name = encode_address(validator.operator)
        own = validator_self_bond(state, validator)
        if validator.power != compute_power(validator.stake, own, validator.jailed, params):
            raise InvariantBroken(f"validator {name}: power {validator.power} does not match stake {validator.stake}")
        if (validator.power > 0) != (validator.operator in active):
            raise InvariantBroken(f"validator {name}: active index disagrees with power {validator.power}")
        if validator.operator not in pending and get_last_power(state, validator.operator) != validator.power:
            raise InvariantBroken(f"validator {name}: power {validator.power} was never reported to CometBFT")
        if state.get(keys.validator_by_cons_key(validator.consensus_address)) != validator.operator:
            raise InvariantBroken(f"validator {name}: consensus address index does not point back to it")
        count += validator.power > 0
    if count != len(active) or count > params.max_validators:
        raise InvariantBroken(
            f"{len(active)} active index keys, {count} validators with power, max {params.max_validators}"
        )


STAKING_INVARIANTS = (check_bonded_pool, check_delegator_shares, check_unbonding_pool, check_redelegation_indexes,
                      check_validator_power)
