"""`slash_validator`: the one way any part of the chain takes stake from a validator and its delegators.

Double signing (`modules/slashing.py`), downtime, and the market's penalties for lazy, absent and losing
verifiers all call it. What a fault at `infraction_height` can reach is the stake that was bonded to the
validator then: its bonded tokens now, the unbonding entries that left it at or after that height, and the
redelegations that moved out of it at or after that height (the moved stake, now bonded at the destination).
The penalty (a fraction of that, or a fixed amount, at most all of it) is split over those parts in proportion
to their balances, exactly: each part's share rounded down, the few utrl left one each to the parts in order
(bonded first, then entries by maturity). So every delegator, staying, unbonding or moved away, loses the same
fraction of what it had at stake.

The bonded part lowers the validator's tokens and leaves its shares: each delegation loses in proportion
without a record changing. A redelegation's part takes shares from the delegator's delegation at the
destination (paying its rewards first, as every share change does). Everything taken is burned.

The only validator with power keeps its bonded stake, and stake redelegated to it is not taken from it: an
empty validator set would halt the chain.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .accounts import burn
from .block import BlockContext, Event
from .crypto import encode_address
from .delegating import remove_stake
from .delegations import get_delegation
from .state import State
from .unbonding import RedelegationEntry, UnbondingEntry, redelegations_from, set_redelegation_entry
from .unbonding import set_unbonding_entry, unbonding_entries_of
from .validators import BONDED_POOL, BPS, UNBONDING_POOL, active_validators, get_validator, save_validator


@dataclass(frozen=True)
class Slash:
    """What a slash burned, by where it came from."""

    bonded: int = 0
    unbonding: int = 0
    redelegated: int = 0

    @property
    def total(self) -> int:
        return self.bonded + self.unbonding + self.redelegated


@dataclass(frozen=True)
class AtStake:
    """The parts of a validator's stake a fault at some height can reach, with their balances."""

    bonded: int
    unbonding: list[UnbondingEntry]
    redelegations: list[RedelegationEntry]

    @property
    def balances(self) -> list[int]:
        return [self.bonded] + [e.amount for e in self.unbonding] + [e.balance for e in self.redelegations]

    @property
    def total(self) -> int:
        return sum(self.balances)


def sole_active_operator(state: State) -> bytes | None:
    active = active_validators(state)
    return active[0].operator if len(active) == 1 else None


def stake_at_risk(state: State, operator: bytes, infraction_height: int) -> AtStake:
    """What a fault of `operator`'s validator at `infraction_height` can take (see the module docstring)."""
    validator = get_validator(state, operator)
    protected = sole_active_operator(state)
    bonded = 0 if validator is None or operator == protected else validator.stake
    unbonding = [e for e in unbonding_entries_of(state, operator) if e.creation_height >= infraction_height]
    moved = [e for e in redelegations_from(state, operator)
             if e.creation_height >= infraction_height and e.balance and e.dst_validator != protected]
    return AtStake(bonded, unbonding, moved)


def slashable_stake(state: State, operator: bytes, infraction_height: int) -> int:
    return stake_at_risk(state, operator, infraction_height).total


def split_penalty(target: int, balances: list[int]) -> list[int]:
    """`target` (at most the sum of `balances`) split in proportion, exactly: shares rounded down, the rest one
    utrl each to the parts in order that still have room."""
    total = sum(balances)
    if total == 0:
        return [0] * len(balances)
    cuts = [balance * target // total for balance in balances]
    left = target - sum(cuts)
    for index, balance in enumerate(balances):
        if left == 0:
            break
        if cuts[index] < balance:
            cuts[index] += 1
            left -= 1
    return cuts


def slash_validator(state: State, ctx: BlockContext, operator: bytes, infraction_height: int, reason: str, *,
                    fraction_bps: int | None = None, amount: int | None = None) -> Slash:
    """Burn `fraction_bps` basis points of the stake a fault of `operator`'s validator at `infraction_height`
    can reach, or `amount` utrl of it (at most all); exactly one of the two. Returns what was burned, by part.
    Does not jail: the caller decides that."""
    if (fraction_bps is None) == (amount is None):
        raise ValueError("give exactly one of fraction_bps and amount")
    at_stake = stake_at_risk(state, operator, infraction_height)
    available = at_stake.total
    target = available * fraction_bps // BPS if fraction_bps is not None else min(max(amount, 0), available)
    cuts = split_penalty(target, at_stake.balances)
    bonded_cut, rest = cuts[0], cuts[1:]
    outcome = Slash(
        bonded=burn_bonded(state, operator, bonded_cut),
        unbonding=burn_unbonding(state, at_stake.unbonding, rest[:len(at_stake.unbonding)]),
        redelegated=burn_redelegated(state, ctx, at_stake.redelegations, rest[len(at_stake.unbonding):]),
    )
    ctx.emit(Event.of("validator_slash", operator=encode_address(operator), reason=reason,
                      infraction_height=infraction_height, burned_bonded=outcome.bonded,
                      burned_unbonding=outcome.unbonding, burned_redelegated=outcome.redelegated))
    return outcome


def burn_bonded(state: State, operator: bytes, cut: int) -> int:
    if cut == 0:
        return 0
    validator = get_validator(state, operator)
    assert validator is not None
    burn(state, BONDED_POOL, cut)
    save_validator(state, dataclasses.replace(validator, stake=validator.stake - cut))
    return cut


def burn_unbonding(state: State, entries: list[UnbondingEntry], cuts: list[int]) -> int:
    for entry, cut in zip(entries, cuts):
        if cut:
            set_unbonding_entry(state, dataclasses.replace(entry, amount=entry.amount - cut))
    burned = sum(cuts)
    if burned:
        burn(state, UNBONDING_POOL, burned)
    return burned


def burn_redelegated(state: State, ctx: BlockContext, entries: list[RedelegationEntry], cuts: list[int]) -> int:
    """Take each cut from the delegator's delegation at the destination (what is left of it, at most)."""
    burned = 0
    for entry, cut in zip(entries, cuts):
        if cut == 0:
            continue
        set_redelegation_entry(state, dataclasses.replace(entry, balance=entry.balance - cut))
        target = get_validator(state, entry.dst_validator)
        delegation = get_delegation(state, entry.delegator, entry.dst_validator)
        if target is None or delegation is None:
            continue  # the delegator already undelegated it: that unbonding is the destination's, not src's
        taken, _ = remove_stake(state, ctx, delegation, target, cut)
        if taken:
            burn(state, BONDED_POOL, taken)
        burned += taken
    return burned
