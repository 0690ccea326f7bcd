"""Validator voting power, as the market sees it: an operator account's power and the total.

The staking module (`trolly.chain.validators`) owns validators; the market only asks it these questions.
A jailed validator, or one that unbonded below one unit of power, has power 0 and so no vote.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .. import validators
from ..accounts import burn
from ..state import State


def operator_power(state: State, operator: bytes) -> int:
    """Voting power of the validator whose operator account is `operator` (0 if none, jailed or unbonded)."""
    return validators.validator_power(state, operator)


def power_reader(state: State) -> Callable[[bytes], int]:
    """`operator_power` over `state`, each operator read once: for one reckoning over many votes, with no write
    between its reads (a committee's members vote on several segments, and a settlement reckons them all)."""
    powers: dict[bytes, int] = {}

    def power(operator: bytes) -> int:
        if operator not in powers:
            powers[operator] = operator_power(state, operator)
        return powers[operator]

    return power


def total_power(state: State) -> int:
    return validators.total_power(state)


def powered_operators(state: State) -> list[tuple[bytes, int]]:
    """(operator, power) of every validator with power > 0, ascending by operator: committee candidates."""
    found = ((v.operator, validators.validator_power(state, v.operator)) for v in validators.active_validators(state))
    return sorted((operator, power) for operator, power in found if power > 0)


def stake_share(state: State, operator: bytes, bps: int, since_height: int) -> int:
    """`bps` basis points of what `burn_validator_stake` could take from the validator for a fault at
    `since_height`: its bonded stake and what it unbonded at or after that height."""
    validator = validators.get_validator(state, operator)
    bonded = validator.stake if validator is not None else 0
    unbonding = sum(entry.amount for entry in validators.unbonding_entries_of(state, operator)
                    if entry.creation_height >= since_height)
    return (bonded + unbonding) * bps // 10_000


def burn_validator_stake(state: State, operator: bytes, amount: int, since_height: int) -> int:
    """Burn up to `amount` of a validator's stake for a fault committed at `since_height`; returns what was
    burned. Bonded stake goes first, then the unbonding entries created at or after that height, oldest
    first: those tokens were bonded when the fault was committed, so unbonding before the penalty falls
    cannot dodge it (as slashing treats them, `modules.slashing`). The only validator with power keeps its
    bonded stake, since an empty validator set would halt the chain."""
    if amount <= 0:
        return 0
    taken = 0
    validator = validators.get_validator(state, operator)
    if validator is not None and [v.operator for v in validators.active_validators(state)] != [operator]:
        taken = min(amount, validator.stake)
        if taken:
            burn(state, validators.BONDED_POOL, taken)
            validators.save_validator(state, dataclasses.replace(validator, stake=validator.stake - taken))
    from_unbonding = 0
    entries = sorted(validators.unbonding_entries_of(state, operator), key=lambda e: (e.creation_height, e.sequence))
    for entry in entries:
        if taken + from_unbonding == amount:
            break
        if entry.creation_height < since_height:
            continue
        cut = min(entry.amount, amount - taken - from_unbonding)
        validators.set_unbonding_entry(state, dataclasses.replace(entry, amount=entry.amount - cut))
        from_unbonding += cut
    if from_unbonding:
        burn(state, validators.UNBONDING_POOL, from_unbonding)
    return taken + from_unbonding
