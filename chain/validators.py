"""Validators: who secures the chain, with how much stake, and the power CometBFT gives them.

A validator is an operator account that has bonded its own tokens (self-bond only: delegation by other
accounts is out of scope for now). Its consensus power is `stake // power_reduction`, or 0 while it is jailed
or its stake is below `min_self_stake`; a validator with power 0 is out of the active set. Bonded tokens sit
in the `BONDED_POOL` module account and unbonding ones in `UNBONDING_POOL`, so total supply stays the sum of
all balances and the staking invariants can compare pools with records.

This file is the API other modules use (the fee distribution, slashing, and the task market's verdict
tallies): `get_validator`, `validator_power`, `total_power`, `active_validators`,
`operator_by_consensus_address`, plus the named verbs the staking module changes state through
(`save_validator`, `add_unbonding_entry`, ...). Every power change goes through `save_validator`, which
recomputes the power, keeps the active-set index and marks the validator so that the end-block sends
CometBFT exactly the powers that changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Iterator

from . import keys
from .codec import decode_u64, encode_u64
from .crypto import ADDRESS_LENGTH, module_address
from .errors import ChainError, InvalidRequest
from .params import get_params
from .proto import staking_pb2
from .state import State

BONDED_POOL = module_address("bonded_pool")
"""Module account holding every validator's bonded stake."""

UNBONDING_POOL = module_address("unbonding_pool")
"""Module account holding tokens that are unbonding, until they mature back to their operator."""

MAX_MONIKER_BYTES = 64

MIN_POWER_REDUCTION = 16
"""With at most 2**64 - 1 utrl in existence, power_reduction >= 16 keeps the total power within CometBFT's
MaxTotalVotingPower (2**60 - 1), so no stake can produce a validator update CometBFT would refuse."""


@dataclass(frozen=True)
class StakingParams:
    """Staking, slashing and set-size parameters (genesis section "staking")."""

    SECTION = "staking"

    power_reduction: int = 1_000_000
    """utrl of stake per unit of consensus power (1 TRL = 1 power). Power = stake // power_reduction."""

    unbonding_blocks: int = 604_800
    """Blocks between a MsgUnbond and the tokens' return (a week of 1-second blocks). Unbonding tokens can
    still be slashed for misbehavior committed before the unbonding started, so this should be at least
    `max_evidence_age_blocks`."""

    max_validators: int = 100
    """Largest active set. A message that would add a validator to a full set fails; jailing, unbonding
    below `min_self_stake` or to zero power frees a place."""

    min_self_stake: int = 1_000_000
    """Smallest stake, in utrl, for a validator to have power; below it the validator leaves the active set."""

    slash_fraction_bps: int = 500
    """Share of stake burned for misbehavior (duplicate vote, light client attack), in basis points (500 = 5%)."""

    max_evidence_age_blocks: int = 100_000
    """Evidence of an infraction more than this many blocks old is ignored."""

    def __post_init__(self) -> None:
        if self.power_reduction < MIN_POWER_REDUCTION:
            raise InvalidRequest(f"staking.power_reduction must be at least {MIN_POWER_REDUCTION}")
        if self.unbonding_blocks < 1:
            raise InvalidRequest("staking.unbonding_blocks must be at least 1")
        if self.max_validators < 1:
            raise InvalidRequest("staking.max_validators must be at least 1")
        if self.min_self_stake < 0:
            raise InvalidRequest("staking.min_self_stake must not be negative")
        if not 0 <= self.slash_fraction_bps <= 10_000:
            raise InvalidRequest("staking.slash_fraction_bps must be in 0..10000")
        if self.max_evidence_age_blocks < 0:
            raise InvalidRequest("staking.max_evidence_age_blocks must not be negative")

    @classmethod
    def localnet(cls) -> "StakingParams":
        """Short periods, so that a developer sees unbonding complete within a minute; the unbonding still
        outlasts the market localnet preset's longest wait from a vote to its reveal deadline (2 x 20 + 10
        blocks), as `init_chain` requires (`market.params.check_unbonding_outlasts_reveals`)."""
        return cls(unbonding_blocks=60, max_evidence_age_blocks=10)


# -- errors (codespace "staking") ------------------------------------------------------------------------------
class StakingError(ChainError):
    """A staking operation failed."""

    codespace = "staking"
    code = 1


class ValidatorNotFound(StakingError):
    """The signer (or the named account) is not a validator operator."""

    code = 2


class ValidatorExists(StakingError):
    """The signer already operates a validator: use MsgBond to add stake."""

    code = 3


class ConsensusKeyInUse(StakingError):
    """This consensus public key is (or was) registered to a validator."""

    code = 4


class InvalidConsensusKey(StakingError):
    """The consensus public key is not a 32-byte ed25519 key."""

    code = 5


class InvalidMoniker(StakingError):
    """The moniker is empty, too long or contains control characters."""

    code = 6


class BelowMinSelfStake(StakingError):
    """The stake would be below the minimum self-stake (or give no power at all)."""

    code = 7


class ValidatorJailed(StakingError):
    """The validator is tombstoned (jailed for good for double-signing) and cannot bond."""

    code = 8


class ValidatorSetFull(StakingError):
    """The active set already holds max_validators validators."""

    code = 9


class InsufficientStake(StakingError):
    """The validator's stake is less than the amount to unbond."""

    code = 10


class LastValidator(StakingError):
    """The change would leave no active validator (CometBFT halts on an empty validator set)."""

    code = 11


# -- the record -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Validator:
    operator: bytes
    consensus_pubkey: bytes
    stake: int
    power: int
    moniker: str
    jailed: bool = False

    @property
    def consensus_address(self) -> bytes:
        """The CometBFT validator address: the first 20 bytes of sha256(pubkey)."""
        return consensus_address_of(self.consensus_pubkey)


def consensus_address_of(pubkey: bytes) -> bytes:
    return hashlib.sha256(pubkey).digest()[:ADDRESS_LENGTH]


def compute_power(stake: int, jailed: bool, params: StakingParams) -> int:
    """Consensus power a validator is entitled to: 0 when jailed or below the minimum self-stake."""
    if jailed or stake < params.min_self_stake:
        return 0
    return stake // params.power_reduction


def encode_validator(validator: Validator) -> bytes:
    return staking_pb2.Validator(
        operator=validator.operator,
        consensus_pubkey=validator.consensus_pubkey,
        stake=validator.stake,
        power=validator.power,
        moniker=validator.moniker,
        jailed=validator.jailed,
    ).SerializeToString(deterministic=True)


def decode_validator(raw: bytes) -> Validator:
    record = staking_pb2.Validator.FromString(raw)
    return Validator(
        operator=record.operator,
        consensus_pubkey=record.consensus_pubkey,
        stake=record.stake,
        power=record.power,
        moniker=record.moniker,
        jailed=record.jailed,
    )


# -- reads: the API of other modules ---------------------------------------------------------------------------
def get_validator(state: State, operator: bytes) -> Validator | None:
    raw = state.get(keys.validator_key(operator))
    return None if raw is None else decode_validator(raw)


def validator_power(state: State, operator: bytes) -> int:
    """Current consensus power of `operator`'s validator; 0 if it has none, is jailed or inactive."""
    validator = get_validator(state, operator)
    return 0 if validator is None else validator.power


def active_validators(state: State) -> list[Validator]:
    """Validators with power > 0, sorted by operator address (at most max_validators of them)."""
    active = []
    for key, _ in state.iterate(keys.ACTIVE_VALIDATOR):
        validator = get_validator(state, key[len(keys.ACTIVE_VALIDATOR):])
        assert validator is not None and validator.power > 0, "active index out of sync"
        active.append(validator)
    return active


def total_power(state: State) -> int:
    """Sum of the active validators' power (the denominator of power-weighted tallies)."""
    return sum(validator.power for validator in active_validators(state))


def operator_by_consensus_address(state: State, consensus_address: bytes) -> bytes | None:
    """The operator whose validator signs with this consensus address (as CometBFT names validators)."""
    return state.get(keys.validator_by_cons_key(consensus_address))


def iterate_validators(state: State) -> Iterator[Validator]:
    """Every validator record, active or not, ascending by operator address."""
    for _, raw in state.iterate(keys.VALIDATOR):
        yield decode_validator(raw)


def staking_params(state: State) -> StakingParams:
    return get_params(state, StakingParams)


# -- writes: the named verbs of the staking module --------------------------------------------------------------
def register_consensus_key(state: State, operator: bytes, consensus_pubkey: bytes) -> None:
    """Bind a consensus key to its operator for good (a key is never reused, even by its own operator)."""
    address = consensus_address_of(consensus_pubkey)
    if state.has(keys.validator_by_cons_key(address)):
        raise ConsensusKeyInUse(f"consensus key with address {address.hex().upper()} is already registered")
    state.set(keys.validator_by_cons_key(address), operator)


def save_validator(state: State, validator: Validator) -> Validator:
    """Store `validator` with its power recomputed from stake and jail status; returns what was stored.

    Keeps the active-set index in step, refuses to grow a full active set, and marks a power change so that
    the end-block reports it to CometBFT.
    """
    params = staking_params(state)
    previous = get_validator(state, validator.operator)
    previous_power = 0 if previous is None else previous.power
    power = compute_power(validator.stake, validator.jailed, params)
    validator = dataclasses.replace(validator, power=power)
    if power > 0 and previous_power == 0:
        active_count = sum(1 for _ in state.iterate(keys.ACTIVE_VALIDATOR))
        if active_count >= params.max_validators:
            raise ValidatorSetFull(f"the active set already holds {active_count} validators (max_validators)")
        state.set(keys.active_validator_key(validator.operator), b"\x01")
    elif power == 0 and previous_power > 0:
        state.delete(keys.active_validator_key(validator.operator))
    if power != previous_power:
        state.set(keys.power_changed_key(validator.operator), b"\x01")
    state.set(keys.validator_key(validator.operator), encode_validator(validator))
    return validator


def get_last_power(state: State, operator: bytes) -> int:
    """The power last sent to CometBFT for this operator's validator (0 if never, or removed)."""
    raw = state.get(keys.last_power_key(operator))
    return 0 if raw is None else decode_u64(raw)


def set_last_power(state: State, operator: bytes, power: int) -> None:
    if power == 0:
        state.delete(keys.last_power_key(operator))
    else:
        state.set(keys.last_power_key(operator), encode_u64(power))


def changed_operators(state: State) -> list[bytes]:
    """Operators whose power changed during this block, ascending."""
    return [key[len(keys.VALIDATOR_POWER_CHANGED):] for key, _ in state.iterate(keys.VALIDATOR_POWER_CHANGED)]


def clear_power_changed(state: State, operator: bytes) -> None:
    state.delete(keys.power_changed_key(operator))


# -- unbonding entries ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnbondingEntry:
    operator: bytes
    amount: int
    creation_height: int
    maturity_height: int
    sequence: int


def encode_unbonding(entry: UnbondingEntry) -> bytes:
    return staking_pb2.UnbondingEntry(
        operator=entry.operator,
        amount=entry.amount,
        creation_height=entry.creation_height,
        maturity_height=entry.maturity_height,
        sequence=entry.sequence,
    ).SerializeToString(deterministic=True)


def decode_unbonding(raw: bytes) -> UnbondingEntry:
    record = staking_pb2.UnbondingEntry.FromString(raw)
    return UnbondingEntry(
        record.operator, record.amount, record.creation_height, record.maturity_height, record.sequence
    )


def next_unbonding_sequence(state: State) -> int:
    raw = state.get(keys.UNBONDING_SEQUENCE)
    sequence = 0 if raw is None else decode_u64(raw)
    state.set(keys.UNBONDING_SEQUENCE, encode_u64(sequence + 1))
    return sequence


def set_unbonding_entry(state: State, entry: UnbondingEntry) -> None:
    """Store (or, with amount 0, delete) an entry and its per-operator index."""
    key = keys.unbonding_key(entry.maturity_height, entry.operator, entry.sequence)
    index = keys.unbonding_by_operator_key(entry.operator, entry.maturity_height, entry.sequence)
    if entry.amount == 0:
        state.delete(key)
        state.delete(index)
    else:
        state.set(key, encode_unbonding(entry))
        state.set(index, b"\x01")


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
    """One operator's entries, by maturity then sequence."""
    entries = []
    prefix = keys.UNBONDING_BY_OPERATOR + operator
    for key, _ in state.iterate(prefix):
        rest = key[len(prefix):]
        raw = state.get(keys.unbonding_key(decode_u64(rest[:8]), operator, decode_u64(rest[8:16])))
        assert raw is not None, "unbonding index out of sync"
        entries.append(decode_unbonding(raw))
    return entries


def iterate_unbonding_entries(state: State) -> Iterator[UnbondingEntry]:
    for _, raw in state.iterate(keys.UNBONDING):
        yield decode_unbonding(raw)
