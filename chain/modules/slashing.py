"""Slashing: validators named in a block's misbehavior evidence lose part of their stake and are tombstoned.

CometBFT reports misbehavior (a duplicate vote, a light client attack) in FinalizeBlock with the offender's
consensus address and the infraction height. In the begin-block, each valid piece of evidence burns
`slash_fraction_bps` of the validator's stake from the bonded pool, and the same fraction of each of its
unbonding entries created at or after the infraction height (those tokens were bonded when it happened,
so unbonding cannot dodge the penalty). The validator is jailed (power 0, out of the active set) and
tombstoned: its signing info says so, and MsgUnjail is refused for good (its operator can still unbond what
is left). `slash_and_jail` is the burn-and-jail step, shared with jailing for downtime (`modules/downtime.py`).

Evidence is ignored, with an event saying why, when it names an unknown consensus address, is older than
`max_evidence_age_blocks` or from the future, was already punished (keyed by infraction height and consensus
address), names a validator that is already tombstoned (punished once, for good), or names the last active
validator (jailing it would leave CometBFT an empty set, which halts the chain). A validator jailed for
downtime is still slashed and tombstoned: going offline must not shield a double sign from its penalty.
Records of punished evidence are pruned once they are older than the evidence age, as older evidence is
refused anyway.

The slash is a fraction of the stake at the time the evidence is processed, not of the power at the
infraction height (there is no delegation, so the two differ only by the operator's own bonds and unbonds
in between; unbonds after the infraction are caught through the unbonding entries).
"""

from __future__ import annotations

import dataclasses

from .. import keys
from ..accounts import burn
from ..block import BlockContext, Event, Misbehavior
from ..crypto import encode_address
from ..module import Module
from ..signing_info import SigningInfo, get_signing_info, save_signing_info
from ..state import State
from ..validators import BONDED_POOL, UNBONDING_POOL, active_validators, get_validator, operator_by_consensus_address
from ..validators import Validator, save_validator, set_unbonding_entry, staking_params, unbonding_entries_of


def skip(ctx: BlockContext, evidence: Misbehavior, reason: str) -> None:
    ctx.emit(
        Event.of(
            "slash_skipped",
            consensus_address=evidence.validator_address.hex().upper(),
            infraction_height=evidence.height,
            reason=reason,
        )
    )


def prune_evidence_records(state: State, oldest_acceptable_height: int) -> None:
    stale = []
    for key, _ in state.iterate(keys.SLASHED_EVIDENCE):
        if int.from_bytes(key[1:9], "big") >= oldest_acceptable_height:
            break
        stale.append(key)
    for key in stale:
        state.delete(key)


def slash_and_jail(state: State, validator: Validator, infraction_height: int, bps: int) -> tuple[int, int]:
    """Burn `bps` of the validator's stake and of its unbonding entries created at or after `infraction_height`,
    and jail it; returns (burned from stake, burned from unbonding)."""
    from_stake = validator.stake * bps // 10_000
    if from_stake:
        burn(state, BONDED_POOL, from_stake)
    save_validator(state, dataclasses.replace(validator, stake=validator.stake - from_stake, jailed=True))
    from_unbonding = 0
    for entry in unbonding_entries_of(state, validator.operator):
        if entry.creation_height >= infraction_height:
            cut = entry.amount * bps // 10_000
            from_unbonding += cut
            set_unbonding_entry(state, dataclasses.replace(entry, amount=entry.amount - cut))
    if from_unbonding:
        burn(state, UNBONDING_POOL, from_unbonding)
    return from_stake, from_unbonding


def tombstone(state: State, consensus_address: bytes, info: SigningInfo | None, height: int) -> None:
    """Mark the validator as double-signed for good, creating its signing info if it never signed a block."""
    info = info if info is not None else SigningInfo(consensus_address, start_height=height)
    save_signing_info(state, dataclasses.replace(info, tombstoned=True))


def slash_validator(state: State, ctx: BlockContext, evidence: Misbehavior) -> None:
    params = staking_params(state)
    height = ctx.env.height
    if evidence.height > height:
        return skip(ctx, evidence, "infraction height is in the future")
    if height - evidence.height > params.max_evidence_age_blocks:
        return skip(ctx, evidence, "evidence too old")
    operator = operator_by_consensus_address(state, evidence.validator_address)
    if operator is None:
        return skip(ctx, evidence, "unknown validator")
    record = keys.slashed_evidence_key(evidence.height, evidence.validator_address)
    if state.has(record):
        return skip(ctx, evidence, "evidence already punished")
    validator = get_validator(state, operator)
    info = get_signing_info(state, evidence.validator_address)
    if validator is None or (info is not None and info.tombstoned):
        return skip(ctx, evidence, "validator already tombstoned")
    if not validator.jailed and [v.operator for v in active_validators(state)] == [operator]:
        # Jailing the only active validator would hand CometBFT an empty set, which halts the chain for good;
        # with a single validator there is nobody left to protect anyway.
        return skip(ctx, evidence, "last active validator")
    state.set(record, b"\x01")
    from_stake, from_unbonding = slash_and_jail(state, validator, evidence.height, params.slash_fraction_bps)
    tombstone(state, evidence.validator_address, info, height)
    ctx.emit(
        Event.of(
            "slash",
            operator=encode_address(operator),
            consensus_address=evidence.validator_address.hex().upper(),
            infraction_height=evidence.height,
            kind=evidence.kind,
            burned_stake=from_stake,
            burned_unbonding=from_unbonding,
            jailed="true",
        )
    )


def begin_block_slashing(state: State, ctx: BlockContext) -> None:
    params = staking_params(state)
    prune_evidence_records(state, ctx.env.height - params.max_evidence_age_blocks)
    for evidence in ctx.env.misbehavior:
        slash_validator(state, ctx, evidence)


SLASHING = Module(name="slashing", begin_block=begin_block_slashing)
