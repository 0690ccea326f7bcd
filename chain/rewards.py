"""Delegators' fee rewards, counted lazily: F1 fee distribution, in exact integers.

Each validator keeps a *current period* with the rewards its delegators earned in it, and for every ended
period the *cumulative reward per share* up to its end (`HistoricalRewards.cumulative_ratio`, scaled by
`REWARD_RATIO_SCALE`). A period ends only when one of its delegations changes (delegate, undelegate,
redelegate, withdraw, a slash reaching a redelegation): then the period's rewards divided by the shares in force
become the next step of the cumulative ratio. A delegation remembers the period it started from; what it has
earned is `shares * (ratio[end] - ratio[start]) // REWARD_RATIO_SCALE`. So crediting a block's fees costs the
same whatever the number of delegators: one record per validator.

The anchor (Cosmos x/distribution) counts per token and keeps slash events to scale each delegation's stake
between periods. Here the ratio is per *share*: a slash lowers a validator's tokens, not its shares, so every
share's part of the rewards stays exactly its part of the stake, and no slash event is needed.

Tokens: rewards credited to a validator's delegators move into the `distribution` module account and count in
the validator's *outstanding* rewards until withdrawn. Two roundings leave dust there: the ratio step is
rounded down (less than one part in `REWARD_RATIO_SCALE` per share per period) and each withdrawal is rounded
down (less than 1 utrl). When a validator's last share leaves, its outstanding dust moves to the *community
pool*, as do rewards of a period that ended with no shares. Invariant: the module account holds exactly the
outstanding rewards of every validator plus the community pool.
"""

from __future__ import annotations

from . import keys
from .accounts import move_funds
from .codec import decode_u64, encode_u64
from .crypto import module_address
from .delegations import Delegation
from .proto import distribution_pb2
from .state import State

DISTRIBUTION_POOL = module_address("distribution")
"""Module account holding the rewards credited to delegators and not yet withdrawn, and the community pool."""

REWARD_RATIO_SCALE = 10**36
"""Fixed-point scale of the cumulative reward per share. A ratio step rounds down by less than one unit of it,
so a delegation of s shares loses less than s / 10**36 utrl per period to that rounding: nothing, for any s a
64-bit supply can buy (shares outgrow the supply only after slashes of nearly all of a validator's stake)."""


# -- records ------------------------------------------------------------------------------------------------
def current_period(state: State, validator: bytes) -> tuple[int, int]:
    """(period, rewards so far) of the validator's period in progress."""
    raw = state.get(keys.rewards_current_key(validator))
    assert raw is not None, "validator without rewards records"
    record = distribution_pb2.CurrentRewards.FromString(raw)
    return record.period, record.rewards


def set_current_period(state: State, validator: bytes, period: int, rewards: int) -> None:
    record = distribution_pb2.CurrentRewards(period=period, rewards=rewards)
    state.set(keys.rewards_current_key(validator), record.SerializeToString(deterministic=True))


def historical(state: State, validator: bytes, period: int) -> tuple[int, int]:
    """(cumulative ratio, reference count) at the end of `period`."""
    raw = state.get(keys.rewards_historical_key(validator, period))
    assert raw is not None, f"historical rewards of period {period} missing"
    record = distribution_pb2.HistoricalRewards.FromString(raw)
    return int(record.cumulative_ratio), record.reference_count


def set_historical(state: State, validator: bytes, period: int, ratio: int, references: int) -> None:
    key = keys.rewards_historical_key(validator, period)
    if references == 0:
        state.delete(key)
        return
    record = distribution_pb2.HistoricalRewards(cumulative_ratio=str(ratio), reference_count=references)
    state.set(key, record.SerializeToString(deterministic=True))


def add_reference(state: State, validator: bytes, period: int, change: int) -> None:
    """Count one more (or, with -1, one fewer) holder of `period`'s ratio; a ratio nobody holds is deleted."""
    ratio, references = historical(state, validator, period)
    set_historical(state, validator, period, ratio, references + change)


def outstanding(state: State, validator: bytes) -> int:
    raw = state.get(keys.rewards_outstanding_key(validator))
    return 0 if raw is None else decode_u64(raw)


def set_outstanding(state: State, validator: bytes, amount: int) -> None:
    if amount == 0:
        state.delete(keys.rewards_outstanding_key(validator))
    else:
        state.set(keys.rewards_outstanding_key(validator), encode_u64(amount))


def community_pool(state: State) -> int:
    raw = state.get(keys.COMMUNITY_POOL)
    return 0 if raw is None else decode_u64(raw)


def add_to_community_pool(state: State, validator: bytes, amount: int) -> None:
    """Move `amount` of the validator's outstanding rewards (already in the module account) to the pool."""
    if amount:
        set_outstanding(state, validator, outstanding(state, validator) - amount)
        state.set(keys.COMMUNITY_POOL, encode_u64(community_pool(state) + amount))


# -- the verbs ----------------------------------------------------------------------------------------------
def initialize_validator_rewards(state: State, validator: bytes) -> None:
    """A new validator: period 0 ends with ratio 0 (held by the current period), period 1 begins."""
    set_historical(state, validator, 0, 0, 1)
    set_current_period(state, validator, 1, 0)


def credit_rewards(state: State, source: bytes, validator: bytes, amount: int) -> None:
    """Credit `amount` utrl from `source` to the delegators of `validator`, in its current period."""
    if amount == 0:
        return
    move_funds(state, source, DISTRIBUTION_POOL, amount)
    period, rewards = current_period(state, validator)
    set_current_period(state, validator, period, rewards + amount)
    set_outstanding(state, validator, outstanding(state, validator) + amount)


def end_period(state: State, validator: bytes, total_shares: int) -> int:
    """End the current period with `total_shares` in force; returns the period ended."""
    period, rewards = current_period(state, validator)
    previous_ratio, _ = historical(state, validator, period - 1)
    if total_shares == 0:
        add_to_community_pool(state, validator, rewards)  # nobody held a share: nobody can claim them
        step = 0
    else:
        step = rewards * REWARD_RATIO_SCALE // total_shares
    set_historical(state, validator, period, previous_ratio + step, 1)
    add_reference(state, validator, period - 1, -1)
    set_current_period(state, validator, period + 1, 0)
    return period


def start_period(state: State, validator: bytes) -> int:
    """The period a delegation whose shares just changed counts from (the last one ended), referenced."""
    period, _ = current_period(state, validator)
    add_reference(state, validator, period - 1, 1)
    return period - 1


def earned(shares: int, start_ratio: int, end_ratio: int) -> int:
    return shares * (end_ratio - start_ratio) // REWARD_RATIO_SCALE


def withdraw_rewards(state: State, delegation: Delegation, total_shares: int) -> int:
    """Pay `delegation` what it earned up to now and release its start period; returns the amount paid.

    The caller then stores the delegation with its new shares and `start_period` (or deletes it). Ending
    the period first makes the rewards of the period in progress count with the shares that earned them."""
    validator = delegation.validator
    ending = end_period(state, validator, total_shares)
    end_ratio, _ = historical(state, validator, ending)
    start_ratio, _ = historical(state, validator, delegation.period)
    amount = earned(delegation.shares, start_ratio, end_ratio)
    add_reference(state, validator, delegation.period, -1)
    if amount:
        set_outstanding(state, validator, outstanding(state, validator) - amount)
        move_funds(state, DISTRIBUTION_POOL, delegation.delegator, amount)
    return amount


def sweep_dust(state: State, validator: bytes) -> None:
    """A validator whose last share left: what its outstanding rewards still hold is rounding dust, nobody's."""
    add_to_community_pool(state, validator, outstanding(state, validator))


def pending_rewards(state: State, delegation: Delegation, total_shares: int) -> int:
    """What `withdraw_rewards` would pay now, read-only (for queries)."""
    period, rewards = current_period(state, delegation.validator)
    ratio, _ = historical(state, delegation.validator, period - 1)
    if total_shares:
        ratio += rewards * REWARD_RATIO_SCALE // total_shares
    start_ratio, _ = historical(state, delegation.validator, delegation.period)
    return earned(delegation.shares, start_ratio, ratio)
