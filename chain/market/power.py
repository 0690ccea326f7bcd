"""Validator voting power, as the market sees it: an operator account's power and the total.

The staking module (`trolly.chain.validators`) owns validators; the market only asks it these questions.
A jailed validator, or one that unbonded below one unit of power, has power 0 and so no vote.
"""

from __future__ import annotations

import dataclasses

from .. import validators
from ..accounts import burn
from ..state import State


def operator_power(state: State, operator: bytes) -> int:
    """Voting power of the validator whose operator account is `operator` (0 if none, jailed or unbonded)."""
    if validators.get_validator(state, operator) is None:
        return 0
    return validators.validator_power(state, operator)


def total_power(state: State) -> int:
    return validators.total_power(state)


def powered_operators(state: State) -> list[tuple[bytes, int]]:
    """(operator, power) of every validator with power > 0, ascending by operator: committee candidates."""
    found = ((v.operator, validators.validator_power(state, v.operator)) for v in validators.active_validators(state))
    return sorted((operator, power) for operator, power in found if power > 0)


def burn_validator_stake(state: State, operator: bytes, amount: int) -> int:
    """Burn up to `amount` of a validator's bonded stake (its power follows); returns what was burned. The only
    validator with power is spared, since an empty validator set would halt the chain."""
    validator = validators.get_validator(state, operator)
    if validator is None or amount <= 0:
        return 0
    if [v.operator for v in validators.active_validators(state)] == [operator]:
        return 0
    taken = min(amount, validator.stake)
    if taken:
        burn(state, validators.BONDED_POOL, taken)
        validators.save_validator(state, dataclasses.replace(validator, stake=validator.stake - taken))
    return taken
