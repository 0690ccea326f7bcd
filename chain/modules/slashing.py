"""Slashing: validators named in a block's misbehavior evidence lose part of their stake and are tombstoned.

CometBFT reports misbehavior (a duplicate vote, a light client attack) in FinalizeBlock with the offender's
consensus address and the infraction height. In the begin-block, each valid piece of evidence burns
`slash_fraction_bps` of the stake the validator had at the infraction height (`slash.slash_validator`: its bonded
stake, so every delegator in proportion, and the unbonding and redelegated stake that left it since). The
validator is jailed (power 0, out of the active set) and tombstoned: its signing info says so, and MsgUnjail
is refused for good (its delegators, operator included, can still undelegate what is left). Jailing for
downtime (`modules/downtime.py`) slashes through the same `slash_validator`.

Evidence is ignored, with an event saying why, when it names an unknown consensus address, is older than
`max_evidence_age_blocks` or from the future, was already punished (keyed by infraction height and consensus
address), names a validator that is already tombstoned (punished once, for good), or names the last active
validator (jailing it would leave CometBFT an empty set, which halts the chain). A validator jailed for
downtime is still slashed and tombstoned: going offline must not shield a double sign from its penalty.
Records of punished evidence are pruned once they are older than the evidence age, as older evidence is
refused anyway.

The slash is a fraction of the stake at the time the evidence is processed plus what left since the
infraction, not of the power at the infraction height (the two differ by delegations made in between).
"""

from __future__ import annotations

import dataclasses

from .. import keys
from ..block import BlockContext, Event, Misbehavior
from ..crypto import encode_address
from ..module import Module
from ..signing_info import SigningInfo, get_signing_info, save_signing_info
from ..slash import slash_validator
from ..state import State
from ..validators import active_validators, get_validator, jail_validator, operator_by_consensus_address
from ..validators import staking_params


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


def tombstone(state: State, consensus_address: bytes, info: SigningInfo | None, height: int) -> None:
    """Mark the validator as double-signed for good, creating its signing info if it never signed a block."""
    info = info if info is not None else SigningInfo(consensus_address, start_height=height)
    save_signing_info(state, dataclasses.replace(info, tombstoned=True))


def punish_evidence(state: State, ctx: BlockContext, evidence: Misbehavior) -> None:
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
    burned = slash_validator(state, ctx, operator, evidence.height, f"double_sign:{evidence.kind}",
                             fraction_bps=params.slash_fraction_bps)
    jail_validator(state, operator)
    tombstone(state, evidence.validator_address, info, height)
    ctx.emit(
        Event.of(
            "slash",
            operator=encode_address(operator),
            consensus_address=evidence.validator_address.hex().upper(),
            infraction_height=evidence.height,
            kind=evidence.kind,
            burned_stake=burned.bonded,
            burned_unbonding=burned.unbonding,
            burned_redelegated=burned.redelegated,
            jailed="true",
        )
    )


def begin_block_slashing(state: State, ctx: BlockContext) -> None:
    params = staking_params(state)
    prune_evidence_records(state, ctx.env.height - params.max_evidence_age_blocks)
    for evidence in ctx.env.misbehavior:
        punish_evidence(state, ctx, evidence)


SLASHING = Module(name="slashing", begin_block=begin_block_slashing)
