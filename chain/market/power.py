"""Validator voting power, as the market sees it: an operator account's power and the total.

The staking module (`trolly.chain.validators`) owns validators; the market only asks it these questions.
A jailed validator, or one that unbonded below one unit of power, has power 0 and so no vote.
"""

from __future__ import annotations

from .. import validators
from ..state import State


def operator_power(state: State, operator: bytes) -> int:
    """Voting power of the validator whose operator account is `operator` (0 if none, jailed or unbonded)."""
    if validators.get_validator(state, operator) is None:
        return 0
    return validators.validator_power(state, operator)


def total_power(state: State) -> int:
    return validators.total_power(state)


def active_operators(state: State) -> list[bytes]:
    """Operator addresses of every active validator, ascending."""
    return sorted(v.operator for v in validators.active_validators(state))
