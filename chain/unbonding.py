"""Stake on its way out: unbonding entries (tokens leaving for a delegator's balance) and redelegation entries
(stake that moved to another validator and stays slashable for what the first one did before the move).

An unbonding entry holds tokens in `UNBONDING_POOL` until its maturity height, then pays them to its delegator.
A redelegation entry holds no tokens (they are bonded at the destination); it records how much of the
delegator's stake there the source validator's earlier infractions can still reach, until it matures. Both
are keyed by maturity first, so the end-block reads only the entries due, and indexed by the validator a slash
starts from and by the delegator (queries, the per-pair entry limit, the no-transitive-redelegation rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from . import keys
from .codec import decode_u64, encode_u64
from .proto import staking_pb2
from .state import State


# -- unbonding entries ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnbondingEntry:
    operator: bytes
    """The validator the tokens were undelegated from."""
    amount: int
    creation_height: int
    maturity_height: int
    sequence: int
    delegator: bytes
    """Who receives the tokens at maturity."""
    initial_balance: int


def encode_unbonding(entry: UnbondingEntry) -> bytes:
    return staking_pb2.UnbondingEntry(
        operator=entry.operator,
        amount=entry.amount,
        creation_height=entry.creation_height,
        maturity_height=entry.maturity_height,
        sequence=entry.sequence,
        delegator=entry.delegator,
        initial_balance=entry.initial_balance,
    ).SerializeToString(deterministic=True)


def decode_unbonding(raw: bytes) -> UnbondingEntry:
    r = staking_pb2.UnbondingEntry.FromString(raw)
    return UnbondingEntry(
        r.operator, r.amount, r.creation_height, r.maturity_height, r.sequence, r.delegator, r.initial_balance
    )


def next_unbonding_sequence(state: State) -> int:
    """A chain-wide counter shared by unbonding and redelegation entries: it makes their keys unique."""
    raw = state.get(keys.UNBONDING_SEQUENCE)
    sequence = 0 if raw is None else decode_u64(raw)
    state.set(keys.UNBONDING_SEQUENCE, encode_u64(sequence + 1))
    return sequence


def set_unbonding_entry(state: State, entry: UnbondingEntry) -> None:
    """Store (or, with amount 0, delete) an entry and its indexes."""
    key = keys.unbonding_key(entry.maturity_height, entry.operator, entry.sequence)
    by_validator = keys.unbonding_by_operator_key(entry.operator, entry.maturity_height, entry.sequence)
    by_delegator = keys.unbonding_by_delegator_key(entry.delegator, entry.operator, entry.maturity_height,
                                                   entry.sequence)
    if entry.amount == 0:
        for stale in (key, by_validator, by_delegator):
            state.delete(stale)
    else:
        state.set(key, encode_unbonding(entry))
        state.set(by_validator, b"\x01")
        state.set(by_delegator, b"\x01")


def unbonding_entries_due(state: State, height: int) -> list[UnbondingEntry]:
    """Entries maturing at or before `height`, oldest first; reads only those (keys sort by maturity)."""
    due = []
    for _, raw in state.iterate(keys.UNBONDING):
        entry = decode_unbonding(raw)
        if entry.maturity_height > height:
            break
        due.append(entry)
    return due


def unbonding_entries_of(state: State, operator: bytes) -> list[UnbondingEntry]:
    """Entries undelegated from one validator (every delegator's), by maturity then sequence."""
    entries = []
    prefix = keys.UNBONDING_BY_OPERATOR + operator
    for key, _ in state.iterate(prefix):
        rest = key[len(prefix):]
        raw = state.get(keys.unbonding_key(decode_u64(rest[:8]), operator, decode_u64(rest[8:16])))
        assert raw is not None, "unbonding index out of sync"
        entries.append(decode_unbonding(raw))
    return entries


def unbonding_entries_of_delegator(state: State, delegator: bytes, validator: bytes = b"") -> list[UnbondingEntry]:
    """One delegator's entries (from one validator, if given), by validator, maturity, sequence."""
    entries = []
    prefix = keys.UNBONDING_BY_DELEGATOR + delegator + validator
    for key, _ in state.iterate(prefix):
        rest = key[len(keys.UNBONDING_BY_DELEGATOR) + 20:]
        operator, maturity, sequence = rest[:20], decode_u64(rest[20:28]), decode_u64(rest[28:36])
        raw = state.get(keys.unbonding_key(maturity, operator, sequence))
        assert raw is not None, "unbonding index out of sync"
        entries.append(decode_unbonding(raw))
    return entries


def iterate_unbonding_entries(state: State) -> Iterator[UnbondingEntry]:
    for _, raw in state.iterate(keys.UNBONDING):
        yield decode_unbonding(raw)


# -- redelegation entries ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RedelegationEntry:
    delegator: bytes
    src_validator: bytes
    dst_validator: bytes
    balance: int
    """utrl of the delegator's stake at `dst_validator` that src's infractions before the move can still take."""
    initial_balance: int
    creation_height: int
    maturity_height: int
    sequence: int


def encode_redelegation(entry: RedelegationEntry) -> bytes:
    return staking_pb2.RedelegationEntry(
        delegator=entry.delegator,
        src_validator=entry.src_validator,
        dst_validator=entry.dst_validator,
        balance=entry.balance,
        initial_balance=entry.initial_balance,
        creation_height=entry.creation_height,
        maturity_height=entry.maturity_height,
        sequence=entry.sequence,
    ).SerializeToString(deterministic=True)


def decode_redelegation(raw: bytes) -> RedelegationEntry:
    r = staking_pb2.RedelegationEntry.FromString(raw)
    return RedelegationEntry(r.delegator, r.src_validator, r.dst_validator, r.balance, r.initial_balance,
                             r.creation_height, r.maturity_height, r.sequence)


def set_redelegation_entry(state: State, entry: RedelegationEntry) -> None:
    """Store an entry and its indexes (an entry stays until it matures, even once its balance is slashed to 0)."""
    state.set(keys.redelegation_key(entry.maturity_height, entry.sequence), encode_redelegation(entry))
    state.set(keys.redelegation_by_source_key(entry.src_validator, entry.maturity_height, entry.sequence), b"\x01")
    state.set(keys.redelegation_by_delegator_key(entry.delegator, entry.dst_validator, entry.maturity_height,
                                                 entry.sequence), b"\x01")


def delete_redelegation_entry(state: State, entry: RedelegationEntry) -> None:
    state.delete(keys.redelegation_key(entry.maturity_height, entry.sequence))
    state.delete(keys.redelegation_by_source_key(entry.src_validator, entry.maturity_height, entry.sequence))
    state.delete(keys.redelegation_by_delegator_key(entry.delegator, entry.dst_validator, entry.maturity_height,
                                                    entry.sequence))


def _redelegation_at(state: State, maturity_and_sequence: bytes) -> RedelegationEntry:
    raw = state.get(keys.REDELEGATION + maturity_and_sequence)
    assert raw is not None, "redelegation index out of sync"
    return decode_redelegation(raw)


def redelegations_due(state: State, height: int) -> list[RedelegationEntry]:
    due = []
    for _, raw in state.iterate(keys.REDELEGATION):
        entry = decode_redelegation(raw)
        if entry.maturity_height > height:
            break
        due.append(entry)
    return due


def redelegations_from(state: State, src: bytes) -> list[RedelegationEntry]:
    """Immature redelegations out of `src`, by maturity then sequence: what a slash of `src` can reach."""
    prefix = keys.REDELEGATION_BY_SOURCE + src
    return [_redelegation_at(state, key[len(prefix):]) for key, _ in state.iterate(prefix)]


def redelegations_into(state: State, delegator: bytes, dst: bytes) -> list[RedelegationEntry]:
    """A delegator's immature redelegations into `dst`, by maturity then sequence."""
    prefix = keys.REDELEGATION_BY_DELEGATOR + delegator + dst
    return [_redelegation_at(state, key[len(prefix):]) for key, _ in state.iterate(prefix)]


def redelegations_of(state: State, delegator: bytes) -> list[RedelegationEntry]:
    prefix = keys.REDELEGATION_BY_DELEGATOR + delegator
    return [_redelegation_at(state, key[len(prefix) + 20:]) for key, _ in state.iterate(prefix)]


def iterate_redelegations(state: State) -> Iterator[RedelegationEntry]:
    for _, raw in state.iterate(keys.REDELEGATION):
        yield decode_redelegation(raw)
