"""Validators: who secures the chain, with how much stake, and the power CometBFT gives them.

A validator is an operator account with a consensus key; its stake is the tokens of every delegation to it, the
operator's own self-bond included (`delegations.py`). Its consensus power is `stake // power_reduction`, or 0
while it is jailed or its operator's self-bond is below `min_self_stake`; a validator with power 0 is out of the
active set. Bonded tokens sit in the `BONDED_POOL` module account and unbonding ones in `UNBONDING_POOL`, so
total supply stays the sum of all balances and the staking invariants can compare pools with records. Its
commission (basis points of its fee share, paid to the operator before its delegators) is bounded by
`max_rate`, fixed at creation, and changes by at most `max_change_rate` once per `commission_change_blocks`.

This file is the API other modules use (the fee distribution, slashing, and the task market's verdict
tallies): `get_validator`, `validator_power`, `total_power`, `active_validators`,
`operator_by_consensus_address`, plus the named verbs the staking module changes state through
(`save_validator`, ...); unbonding and redelegation entries are in `unbonding.py`. Every power change goes
through `save_validator`, which recomputes the power, keeps the active-set index and marks the validator so
that the end-block sends CometBFT exactly the powers that changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Iterator

from . import keys
from .codec import decode_u64, encode_u64
from .crypto import ADDRESS_LENGTH, module_address
from .delegations import self_bond
from .errors import ChainError, InvalidRequest
from .params import get_params
from .proto import staking_pb2
from .state import State

BONDED_POOL = module_address("bonded_pool")
"""Module account holding every validator's bonded stake."""

UNBONDING_POOL = module_address("unbonding_pool")
"""Module account holding tokens that are unbonding, until they mature back to their delegator."""

MAX_MONIKER_BYTES = 64
MAX_DETAILS_BYTES = 280
BPS = 10_000
"""Commission rates are in basis points of a validator's fee share: 10000 is all of it."""


@dataclass(frozen=True)
class Commission:
    """A validator's commission terms, in basis points."""

    rate: int
    max_rate: int
    max_change_rate: int


DEFAULT_COMMISSION = Commission(rate=1_000, max_rate=2_000, max_change_rate=100)
"""Terms of a MsgCreateValidator (or genesis validator) that sets none: 10%, at most 20%, moving by at most 1
point a day, the values CometBFT chains' operators commonly start from."""

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

    commission_change_blocks: int = 86_400
    """A validator's commission rate changes at most once per this many blocks (a day of 1-second blocks), and
    by at most its `max_change_rate` each time: delegators see a change coming and have time to leave."""

    max_entries: int = 7
    """Most unbonding entries per (delegator, validator) and redelegation entries per (delegator, source,
    destination) at a time: bounds the work of a slash and of a delegator's queries."""

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
        if self.commission_change_blocks < 0:
            raise InvalidRequest("staking.commission_change_blocks must not be negative")
        if self.max_entries < 1:
            raise InvalidRequest("staking.max_entries must be at least 1")

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
    """The validator is tombstoned (jailed for good for double-signing): its operator cannot self-bond to it
    (MsgBond), as it can never unjail. Others may still delegate to it (MsgDelegate), as in the anchor."""

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


# Codes 20 and up are delegation's and commission's (12..19 are left for downtime jailing).
class InsufficientDelegation(StakingError):
    """The delegation holds fewer tokens than the amount to undelegate or redelegate."""

    code = 20


class DelegationNotFound(StakingError):
    """The signer has no delegation to this validator."""

    code = 21


class InvalidCommission(StakingError):
    """The commission terms are out of range: rate <= max_rate <= 10000 and max_change_rate <= max_rate."""

    code = 22


class CommissionAboveMax(StakingError):
    """The new commission rate exceeds the validator's max_rate."""

    code = 23


class CommissionChangeTooLarge(StakingError):
    """The commission rate would change by more than the validator's max_change_rate."""

    code = 24


class CommissionChangeTooSoon(StakingError):
    """The commission rate changed less than commission_change_blocks ago."""

    code = 25


class InvalidDetails(StakingError):
    """The details text is too long or contains control characters."""

    code = 26


class SelfRedelegation(StakingError):
    """A redelegation must move stake to a different validator."""

    code = 27


class TransitiveRedelegation(StakingError):
    """Stake that arrived at this validator by a redelegation not yet matured cannot be redelegated again."""

    code = 28


class TooManyEntries(StakingError):
    """Too many unbonding (or redelegation) entries are in flight for this pair; wait for one to mature."""

    code = 29


class ValidatorHasNoTokens(StakingError):
    """The validator's stake was slashed to nothing while it still has delegations: new shares would be
    worthless."""

    code = 30


class InvalidValidatorAddress(StakingError):
    """The validator address is not a 20-byte account address."""

    code = 31


# -- the record -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Validator:
    operator: bytes
    consensus_pubkey: bytes
    stake: int
    """Bonded utrl of every delegation to it."""
    power: int
    moniker: str
    jailed: bool = False
    delegator_shares: int = 0
    """The shares of all its delegations together (`delegations.py`)."""
    commission: Commission = DEFAULT_COMMISSION
    commission_update_height: int = 0
    details: str = ""

    @property
    def consensus_address(self) -> bytes:
        """The CometBFT validator address: the first 20 bytes of sha256(pubkey)."""
        return consensus_address_of(self.consensus_pubkey)


def consensus_address_of(pubkey: bytes) -> bytes:
    return hashlib.sha256(pubkey).digest()[:ADDRESS_LENGTH]


def compute_power(stake: int, own_bond: int, jailed: bool, params: StakingParams) -> int:
    """Consensus power a validator is entitled to: 0 when jailed or its operator's self-bond (`own_bond`) is
    below the minimum self-stake."""
    if jailed or own_bond < params.min_self_stake:
        return 0
    return stake // params.power_reduction


def validator_self_bond(state: State, validator: Validator) -> int:
    """Tokens of the operator's own delegation to `validator`."""
    return self_bond(state, validator.operator, validator.stake, validator.delegator_shares)


def encode_validator(validator: Validator) -> bytes:
    return staking_pb2.Validator(
        operator=validator.operator,
        consensus_pubkey=validator.consensus_pubkey,
        stake=validator.stake,
        power=validator.power,
        moniker=validator.moniker,
        jailed=validator.jailed,
        delegator_shares=str(validator.delegator_shares),
        commission_rate=validator.commission.rate,
        max_rate=validator.commission.max_rate,
        max_change_rate=validator.commission.max_change_rate,
        commission_update_height=validator.commission_update_height,
        details=validator.details,
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
        delegator_shares=int(record.delegator_shares or "0"),
        commission=Commission(record.commission_rate, record.max_rate, record.max_change_rate),
        commission_update_height=record.commission_update_height,
        details=record.details,
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
    """Store `validator` with its power recomputed from stake, self-bond and jail status; returns what was stored.
    Call it after the operator's delegation is written, as the power reads it.

    Keeps the active-set index in step, refuses to grow a full active set, and marks a power change so that
    the end-block reports it to CometBFT.
    """
    params = staking_params(state)
    previous = get_validator(state, validator.operator)
    previous_power = 0 if previous is None else previous.power
    power = compute_power(validator.stake, validator_self_bond(state, validator), validator.jailed, params)
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


def jail_validator(state: State, operator: bytes) -> Validator:
    """Jail `operator`'s validator: power 0, out of the active set until it unjails (if it may)."""
    validator = get_validator(state, operator)
    assert validator is not None, "jailing an unknown validator"
    return save_validator(state, dataclasses.replace(validator, jailed=True))


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
