"""The verbs that change delegations: delegate, undelegate, redelegate, withdraw rewards.

Every change of a delegation's shares first pays it the rewards it earned (ending the validator's rewards period
with the shares that earned them, `rewards.py`; a new delegation ends the period too, so that it never shares in
rewards earned before it), then stores the new shares and the period they count from, then
the validator (whose power reads the operator's delegation). The operator's self-bond goes through the same
verbs: MsgCreateValidator, MsgBond and MsgUnbond are a delegation, a delegation and an undelegation to the
signer's own validator.

A change that would leave CometBFT an empty validator set is refused (`LastValidator`): the chain would halt.
"""

from __future__ import annotations

import dataclasses

from .accounts import move_funds
from .block import BlockContext, Event
from .codec import U64_MAX
from .crypto import encode_address
from .delegations import Delegation, get_delegation, set_delegation, shares_for_deposit, shares_for_withdrawal
from .delegations import tokens_of
from .errors import InvalidAmount
from .rewards import end_period, start_period, sweep_dust, withdraw_rewards
from .state import State
from .unbonding import RedelegationEntry, UnbondingEntry, next_unbonding_sequence, redelegations_into
from .unbonding import set_redelegation_entry, set_unbonding_entry, unbonding_entries_of_delegator
from .validators import BONDED_POOL, UNBONDING_POOL, DelegationNotFound, InsufficientDelegation, LastValidator
from .validators import TooManyEntries, TransitiveRedelegation, Validator, ValidatorHasNoTokens, ValidatorNotFound
from .validators import active_validators, get_validator, save_validator, staking_params


def existing_validator(state: State, operator: bytes) -> Validator:
    validator = get_validator(state, operator)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(operator)} operates no validator")
    return validator


def existing_delegation(state: State, delegator: bytes, operator: bytes) -> Delegation:
    delegation = get_delegation(state, delegator, operator)
    if delegation is None:
        raise DelegationNotFound(f"{encode_address(delegator)} has no delegation to {encode_address(operator)}")
    return delegation


def delegation_tokens(delegation: Delegation, validator: Validator) -> int:
    return tokens_of(delegation.shares, validator.stake, validator.delegator_shares)


def settle_rewards(state: State, ctx: BlockContext, delegation: Delegation, validator: Validator) -> int:
    """Pay a delegation its rewards before its shares change; returns the amount."""
    amount = withdraw_rewards(state, delegation, validator.delegator_shares)
    if amount:
        ctx.emit(Event.of("withdraw_rewards", delegator=encode_address(delegation.delegator),
                          validator=encode_address(delegation.validator), amount=amount))
    return amount


def set_shares(state: State, ctx: BlockContext, delegator: bytes, validator: Validator, shares_change: int,
               stake_change: int) -> Validator:
    """Settle the delegation's rewards, change its shares and the validator's stake; returns the validator saved."""
    delegation = get_delegation(state, delegator, validator.operator)
    held = 0
    if delegation is not None:
        settle_rewards(state, ctx, delegation, validator)
        held = delegation.shares
    else:  # the rewards so far belong to the shares there before this one: end their period first
        end_period(state, validator.operator, validator.delegator_shares)
    shares = held + shares_change
    period = start_period(state, validator.operator) if shares else 0
    set_delegation(state, Delegation(delegator, validator.operator, shares, period))
    total = validator.delegator_shares + shares_change
    if total == 0:
        sweep_dust(state, validator.operator)
    return save_validator(state, dataclasses.replace(validator, stake=validator.stake + stake_change,
                                                     delegator_shares=total))


def add_stake(state: State, ctx: BlockContext, delegator: bytes, validator: Validator, amount: int) -> Validator:
    """Give `delegator` the shares `amount` bonded tokens buy at `validator` (tokens already in the bonded pool)."""
    if validator.delegator_shares and not validator.stake:
        raise ValidatorHasNoTokens(f"validator {validator.moniker!r} was slashed to nothing; delegate elsewhere")
    if validator.stake + amount > U64_MAX:
        raise InvalidAmount("the validator's stake would exceed 64 bits")
    shares = shares_for_deposit(amount, validator.stake, validator.delegator_shares)
    if shares == 0:
        raise InvalidAmount(f"{amount}utrl is too little to buy one share of validator {validator.moniker!r}")
    return set_shares(state, ctx, delegator, validator, shares, amount)


def remove_stake(state: State, ctx: BlockContext, delegation: Delegation, validator: Validator,
                 amount: int) -> tuple[int, Validator]:
    """Take `amount` tokens (all the delegation owns, at most) out of a delegation; they stay in the bonded pool
    for the caller to move. Returns (tokens taken, the validator saved)."""
    owned = delegation_tokens(delegation, validator)
    shares, tokens = delegation.shares, owned  # all of it: its last fraction of a token is not left behind
    if amount < owned:
        needed = shares_for_withdrawal(amount, validator.stake, validator.delegator_shares)
        if needed < delegation.shares:
            shares, tokens = needed, amount
    return tokens, set_shares(state, ctx, delegation.delegator, validator, -shares, -tokens)


def refuse_empty_set(state: State, before: Validator, after: Validator) -> None:
    """CometBFT stops the chain when a block's updates empty the validator set: refuse the last exit."""
    if before.power > 0 and after.power == 0 and not active_validators(state):
        raise LastValidator("this is the last active validator; its power cannot drop to zero")


def check_owned(delegation: Delegation, validator: Validator, amount: int) -> None:
    owned = delegation_tokens(delegation, validator)
    if amount > owned:
        raise InsufficientDelegation(
            f"cannot move {amount}utrl, the delegation to {validator.moniker!r} holds {owned}utrl"
        )


# -- the verbs of the messages ------------------------------------------------------------------------------------
def delegate(state: State, ctx: BlockContext, delegator: bytes, operator: bytes, amount: int) -> Validator:
    validator = existing_validator(state, operator)
    move_funds(state, delegator, BONDED_POOL, amount)
    validator = add_stake(state, ctx, delegator, validator, amount)
    ctx.emit(Event.of("delegate", delegator=encode_address(delegator), validator=encode_address(operator),
                      amount=amount, stake=validator.stake, power=validator.power))
    return validator


def undelegate(state: State, ctx: BlockContext, delegator: bytes, operator: bytes, amount: int) -> UnbondingEntry:
    """Start unbonding `amount` of a delegation: out of the bonded pool now, back to the delegator at maturity."""
    before = existing_validator(state, operator)
    delegation = existing_delegation(state, delegator, operator)
    check_owned(delegation, before, amount)
    params = staking_params(state)
    if len(unbonding_entries_of_delegator(state, delegator, operator)) >= params.max_entries:
        raise TooManyEntries(f"{params.max_entries} unbonding entries from this validator are already in flight")
    tokens, after = remove_stake(state, ctx, delegation, before, amount)
    refuse_empty_set(state, before, after)
    move_funds(state, BONDED_POOL, UNBONDING_POOL, tokens)
    height = ctx.env.height
    entry = UnbondingEntry(operator, tokens, height, height + params.unbonding_blocks,
                           next_unbonding_sequence(state), delegator, tokens)
    set_unbonding_entry(state, entry)
    ctx.emit(Event.of("undelegate", delegator=encode_address(delegator), validator=encode_address(operator),
                      amount=tokens, stake=after.stake, power=after.power, maturity_height=entry.maturity_height))
    return entry


def redelegate(state: State, ctx: BlockContext, delegator: bytes, src: bytes, dst: bytes,
               amount: int) -> RedelegationEntry:
    """Move `amount` of a delegation from `src` to `dst` at once; the entry keeps it slashable for src's past."""
    source = existing_validator(state, src)
    target = existing_validator(state, dst)
    delegation = existing_delegation(state, delegator, src)
    check_owned(delegation, source, amount)
    if redelegations_into(state, delegator, src):
        raise TransitiveRedelegation("stake redelegated to this validator cannot move on before that "
                                     "redelegation matures")
    params = staking_params(state)
    if sum(e.src_validator == src for e in redelegations_into(state, delegator, dst)) >= params.max_entries:
        raise TooManyEntries(f"{params.max_entries} redelegations between these validators are already in flight")
    if target.delegator_shares and not target.stake:
        raise ValidatorHasNoTokens(f"validator {target.moniker!r} was slashed to nothing; delegate elsewhere")
    tokens, after = remove_stake(state, ctx, delegation, source, amount)
    refuse_empty_set(state, source, after)
    add_stake(state, ctx, delegator, existing_validator(state, dst), tokens)
    height = ctx.env.height
    entry = RedelegationEntry(delegator, src, dst, tokens, tokens, height, height + params.unbonding_blocks,
                              next_unbonding_sequence(state))
    set_redelegation_entry(state, entry)
    ctx.emit(Event.of("redelegate", delegator=encode_address(delegator), src_validator=encode_address(src),
                      dst_validator=encode_address(dst), amount=tokens, maturity_height=entry.maturity_height))
    return entry


def withdraw_delegation_rewards(state: State, ctx: BlockContext, delegator: bytes, operator: bytes) -> int:
    """Pay a delegation its rewards; its shares stay, counting from now."""
    validator = existing_validator(state, operator)
    delegation = existing_delegation(state, delegator, operator)
    amount = settle_rewards(state, ctx, delegation, validator)
    set_delegation(state, dataclasses.replace(delegation, period=start_period(state, operator)))
    return amount
