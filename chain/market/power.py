"""Validator voting power, as the market sees it: an operator account's power and the total.

The staking module (`trolly.chain.validators`) owns validators; the market only asks it these questions.
A jailed validator, or one that unbonded below one unit of power, has power 0 and so no vote. Penalties
take stake through `slash.slash_validator`, which reaches the validator's delegators in proportion.
"""

from __future__ import annotations

from typing import Callable

from .. import keys, validators
from ..block import BlockContext
from ..slash import slashable_stake
from ..state import State


def operator_power(state: State, operator: bytes) -> int:
    """Voting power of the validator whose operator account is `operator` (0 if none, jailed or unbonded)."""
    return validators.validator_power(state, operator)


def shared_power(state: State, ctx: BlockContext, operator: bytes) -> int:
    """`operator_power`, the validator's record decoded once per block while its bytes stay the same (the rule of
    `store.shared_record`, in the same `BlockContext.decoded`): a block of verdicts reads each committee member's
    power at every vote on its segments, and a validator's record changes only when something stakes, unbonds or
    slashes it."""
    key = keys.validator_key(operator)
    raw = state.get(key)
    if raw is None:
        return 0
    seen = ctx.decoded.get(key)
    if seen is None or not (seen[0] is raw or seen[0] == raw):
        seen = ctx.decoded[key] = (raw, validators.decode_validator(raw))
    return seen[1].power


def power_reader(state: State, ctx: BlockContext | None = None) -> Callable[[bytes], int]:
    """`operator_power` over `state`, each operator read once: for one reckoning over many votes, with no write
    between its reads (a committee's members vote on several segments, and a settlement reckons them all). With
    `ctx`, `shared_power`: each record decoded once per block, and a write between reads is seen."""
    if ctx is not None:
        return lambda operator: shared_power(state, ctx, operator)
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
    """`bps` basis points of what a slash for a fault at `since_height` could take from the validator: its bonded
    stake and what was undelegated or redelegated from it at or after that height (`slash.slashable_stake`)."""
    return slashable_stake(state, operator, since_height) * bps // 10_000
