"""Delegations: who holds how many shares of which validator, and what those shares are worth in tokens.

A validator's bonded tokens (`Validator.stake`) belong to its delegations in proportion to their shares: a
delegation holding `shares` of a validator with `stake` tokens and `total` shares owns
`shares * stake // total` tokens. A slash lowers `stake` and leaves every share alone, so each delegator
loses in proportion without a record being touched. The operator's self-bond is a delegation like any other.

Shares are exact integers. The first delegation of a validator gets one share per token; later ones get
`amount * total // stake` (rounded down, so the shares already there never lose value). Removing tokens takes
`ceil(amount * total / stake)` shares (rounded up, for the same reason), or every share when the delegation
asks for all it owns. Shares are stored as decimal text, since after heavy slashing a share can be worth
much less than a token and their count outgrow 64 bits.

This file holds only the records, their indexes and that arithmetic; the verbs that move tokens live in
`delegating.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from . import keys
from .proto import staking_pb2
from .state import State

ADDRESS_BYTES = 20


@dataclass(frozen=True)
class Delegation:
    delegator: bytes
    validator: bytes
    shares: int
    period: int
    """F1: the validator's rewards period this delegation's rewards are counted from (`rewards.py`)."""


def encode_delegation(delegation: Delegation) -> bytes:
    return staking_pb2.Delegation(
        delegator=delegation.delegator,
        validator=delegation.validator,
        shares=str(delegation.shares),
        period=delegation.period,
    ).SerializeToString(deterministic=True)


def decode_delegation(raw: bytes) -> Delegation:
    record = staking_pb2.Delegation.FromString(raw)
    return Delegation(record.delegator, record.validator, int(record.shares), record.period)


def get_delegation(state: State, delegator: bytes, validator: bytes) -> Delegation | None:
    raw = state.get(keys.delegation_key(delegator, validator))
    return None if raw is None else decode_delegation(raw)


def set_delegation(state: State, delegation: Delegation) -> None:
    """Store a delegation and its index; one with no shares is deleted instead."""
    key = keys.delegation_key(delegation.delegator, delegation.validator)
    index = keys.delegation_by_validator_key(delegation.validator, delegation.delegator)
    if delegation.shares == 0:
        state.delete(key)
        state.delete(index)
    else:
        state.set(key, encode_delegation(delegation))
        state.set(index, b"\x01")


def delegations_of(state: State, delegator: bytes) -> Iterator[Delegation]:
    """A delegator's delegations, ascending by validator."""
    for _, raw in state.iterate(keys.DELEGATION + delegator):
        yield decode_delegation(raw)


def delegations_to(state: State, validator: bytes) -> Iterator[Delegation]:
    """A validator's delegations, ascending by delegator (reads the index, then each record)."""
    prefix = keys.DELEGATION_BY_VALIDATOR + validator
    for key, _ in state.iterate(prefix):
        delegation = get_delegation(state, key[len(prefix):], validator)
        assert delegation is not None, "delegation index out of sync"
        yield delegation


def iterate_delegations(state: State) -> Iterator[Delegation]:
    for _, raw in state.iterate(keys.DELEGATION):
        yield decode_delegation(raw)


# -- shares and tokens ----------------------------------------------------------------------------------------
def tokens_of(shares: int, stake: int, total_shares: int) -> int:
    """What `shares` of a validator with `stake` tokens and `total_shares` shares are worth, rounded down."""
    if total_shares == 0:
        return 0
    return shares * stake // total_shares


def shares_for_deposit(amount: int, stake: int, total_shares: int) -> int:
    """Shares a deposit of `amount` tokens buys: one per token into an empty validator, else rounded down."""
    if total_shares == 0:
        return amount
    return amount * total_shares // stake


def shares_for_withdrawal(amount: int, stake: int, total_shares: int) -> int:
    """Shares to give up for `amount` tokens, rounded up so that the shares left keep their value."""
    return -(-amount * total_shares // stake)


def self_bond(state: State, operator: bytes, stake: int, total_shares: int) -> int:
    """Tokens of the operator's own delegation to its validator."""
    delegation = get_delegation(state, operator, operator)
    return 0 if delegation is None else tokens_of(delegation.shares, stake, total_shares)
