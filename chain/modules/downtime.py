"""Downtime: validators that stop signing blocks are jailed and slashed; their operators unjail them later.

Each FinalizeBlock carries the last commit: every validator of the previous block's set, by consensus address,
and whether its vote was there (a nil vote counts as signed: it proves the validator is up). In the
begin-block, each validator's vote is counted into its signing info (`signing_info.py`): one bit per commit, a
ring of `signed_blocks_window` bits, and a counter of the bits set. Once a validator has been counted in a whole
window, missing more than `max_missed_blocks` of it jails it for `downtime_jail_blocks` and burns
`slash_fraction_downtime_bps` of the stake it had then, its delegators' with it (`slash_for_downtime`); its window starts again, empty. A jailed or
tombstoned validator is not counted (its power is 0; CometBFT still lists it for the block or two before the
update reaches it). Nobody is jailed if that would leave no active validator.

Halts. A halted chain makes no blocks, so nobody misses any while it is halted; what bit Cosmos SDK
chains' operators is the restart. Validators that were missing blocks before the halt (often the very ones whose
absence halted it) are frozen close to the limit, and the first blocks after a restart carry commits that
only the validators already back have signed (the others are still starting, catching up, or reconnecting);
a few more misses and everyone slow to return is jailed at once. So a block more than `halt_reset_seconds` after
the previous one (block time, which less than a third of the power cannot move) starts every validator's window again
at that block: no one is judged until a whole window after the restart. A change of `signed_blocks_window`
starts every window again in the same way, since the bits of the old ring no longer mean the same commits.

Only blocks that carry a last commit are tracked (every block after the first on a real chain); the clock that
detects halts is written by those blocks only.
"""

from __future__ import annotations

import dataclasses

from .. import keys
from ..block import BlockContext, Event, VoteInfo
from ..crypto import decode_address, encode_address
from ..errors import InvalidRequest, NotFound
from ..messages.unjail import process_unjail, validate_unjail
from ..module import InvariantBroken, MessageRoute, Module, QueryResult, QueryRoute
from ..proto.slashing_pb2 import MsgUnjail
from ..signing_info import LivenessClock, SigningInfo, SlashingParams, count_missed_blocks, fresh_window
from ..signing_info import get_liveness_clock, get_signing_info, iterate_signing_infos, missed_block
from ..signing_info import save_signing_info, set_liveness_clock, set_missed_block, slashing_params
from ..slash import Slash, slash_validator
from ..state import State
from ..validators import Validator, active_validators, get_validator, jail_validator, operator_by_consensus_address


def slash_for_downtime(state: State, ctx: BlockContext, validator: Validator, infraction_height: int,
                       bps: int) -> Slash:
    """Burn `bps` of what the validator had at stake at `infraction_height` (`slash.slash_validator`: its
    delegators, unbonding and redelegated stake in proportion), then jail it; returns what was burned. The one
    place downtime reaches stake."""
    burned = slash_validator(state, ctx, validator.operator, infraction_height, "downtime", fraction_bps=bps)
    jail_validator(state, validator.operator)
    return burned


# -- halts -------------------------------------------------------------------------------------------------------
def restart_windows_after_halt(state: State, ctx: BlockContext, params: SlashingParams) -> None:
    """Start every validator's window again at this block after a halt or a change of window (module docstring)."""
    previous = get_liveness_clock(state)
    time_ns = max(ctx.env.time_ns, 0)
    set_liveness_clock(state, LivenessClock(time_ns, params.signed_blocks_window))
    if previous is None:
        return
    gap_ns = time_ns - previous.time_ns
    if gap_ns > params.halt_reset_seconds * 1_000_000_000:
        reason = "halt"
    elif previous.signed_blocks_window != params.signed_blocks_window:
        reason = "signed_blocks_window changed"
    else:
        return
    restarted = 0
    for info in list(iterate_signing_infos(state)):
        save_signing_info(state, fresh_window(state, info, ctx.env.height))
        restarted += 1
    ctx.emit(Event.of("liveness_reset", reason=reason, gap_seconds=gap_ns // 1_000_000_000, validators=restarted))


# -- counting votes ----------------------------------------------------------------------------------------------
def count_vote(state: State, ctx: BlockContext, params: SlashingParams, vote: VoteInfo) -> None:
    """Add one commit to the validator's window; jail it if it has now missed too many."""
    operator = operator_by_consensus_address(state, vote.validator_address)
    validator = None if operator is None else get_validator(state, operator)
    if validator is None or validator.jailed:
        return
    height = ctx.env.height
    info = get_signing_info(state, vote.validator_address) or SigningInfo(vote.validator_address, height)
    if info.tombstoned:
        return
    index = info.index_offset % params.signed_blocks_window
    missed = not vote.signed_last_block
    counter = info.missed_blocks_counter
    if missed_block(state, info.consensus_address, index) != missed:
        set_missed_block(state, info.consensus_address, index, missed)
        counter += 1 if missed else -1
    info = dataclasses.replace(info, index_offset=info.index_offset + 1, missed_blocks_counter=counter)
    if missed:
        ctx.emit(Event.of("liveness", consensus_address=info.consensus_address.hex().upper(),
                          missed_blocks=counter, height=height - 1))
    if info.index_offset >= params.signed_blocks_window and counter > params.max_missed_blocks:
        info = jail_for_downtime(state, ctx, params, validator, info)
    save_signing_info(state, info)


def jail_for_downtime(state: State, ctx: BlockContext, params: SlashingParams, validator: Validator,
                      info: SigningInfo) -> SigningInfo:
    """Slash and jail `validator`, unless it is the last active one; returns its signing info afterwards."""
    if [v.operator for v in active_validators(state)] == [validator.operator]:
        ctx.emit(Event.of("slash_skipped", consensus_address=info.consensus_address.hex().upper(),
                          reason="last active validator"))
        return info
    height = ctx.env.height
    burned = slash_for_downtime(state, ctx, validator, height - 1, params.slash_fraction_downtime_bps)
    jailed_until = height + params.downtime_jail_blocks
    ctx.emit(
        Event.of(
            "slash",
            operator=encode_address(validator.operator),
            consensus_address=info.consensus_address.hex().upper(),
            infraction_height=height - 1,
            reason="downtime",
            missed_blocks=info.missed_blocks_counter,
            burned_stake=burned.bonded,
            burned_unbonding=burned.unbonding,
            burned_redelegated=burned.redelegated,
            jailed="true",
            jailed_until=jailed_until,
        )
    )
    return dataclasses.replace(fresh_window(state, info, height), jailed_until=jailed_until)


def track_liveness(state: State, ctx: BlockContext) -> None:
    """Begin-block: count the last commit's votes (module docstring)."""
    if not ctx.env.last_commit:
        return
    params = slashing_params(state)
    restart_windows_after_halt(state, ctx, params)
    for vote in ctx.env.last_commit:
        count_vote(state, ctx, params, vote)


# -- queries -----------------------------------------------------------------------------------------------------
def signing_info_json(validator: Validator, info: SigningInfo | None, params: SlashingParams) -> dict:
    """A validator's liveness as clients read it; a validator not yet seen in a commit has an empty record."""
    info = info or SigningInfo(validator.consensus_address, 0)
    return {
        "operator": encode_address(validator.operator),
        "consensus_address": info.consensus_address.hex().upper(),
        "start_height": info.start_height,
        "index_offset": info.index_offset,
        "missed_blocks_counter": info.missed_blocks_counter,
        "max_missed_blocks": params.max_missed_blocks,
        "signed_blocks_window": params.signed_blocks_window,
        "jailed": validator.jailed,
        "jailed_until": info.jailed_until,
        "tombstoned": info.tombstoned,
    }


def query_signing_info(state: State, arg: str, data: bytes) -> QueryResult:
    operator = decode_address(arg)
    validator = get_validator(state, operator)
    if validator is None:
        raise NotFound(f"{arg} operates no validator")
    info = get_signing_info(state, validator.consensus_address)
    return QueryResult(signing_info_json(validator, info, slashing_params(state)),
                       proof_key=keys.signing_info_key(validator.consensus_address))


def query_signing_infos(state: State, arg: str, data: bytes) -> QueryResult:
    if arg:
        raise InvalidRequest("/signing_infos takes no argument; use /signing_info/<operator>")
    params = slashing_params(state)
    answers = []
    for info in iterate_signing_infos(state):
        operator = operator_by_consensus_address(state, info.consensus_address)
        validator = None if operator is None else get_validator(state, operator)
        assert validator is not None, "signing info of an unknown consensus address"
        answers.append(signing_info_json(validator, info, params))
    return QueryResult(answers)


# -- invariants --------------------------------------------------------------------------------------------------
def check_missed_counters(state: State) -> None:
    """Each signing info's missed counter equals the set bits of its array, and no more commits were missed
    than were counted."""
    for info in iterate_signing_infos(state):
        bits = count_missed_blocks(state, info.consensus_address)
        if bits != info.missed_blocks_counter or bits > info.index_offset:
            raise InvariantBroken(f"signing info {info.consensus_address.hex().upper()}: counter "
                                  f"{info.missed_blocks_counter}, {bits} bits set, {info.index_offset} counted")


DOWNTIME = Module(
    name="downtime",
    messages=(MessageRoute(MsgUnjail, validate_unjail, process_unjail),),
    queries=(
        QueryRoute("/signing_info", query_signing_info,
                   "liveness of /signing_info/<operator>: missed blocks, jailed until, tombstoned"),
        QueryRoute("/signing_infos", query_signing_infos, "liveness of every validator that has signed a block"),
    ),
    params=(SlashingParams,),
    begin_block=track_liveness,
    invariants=(check_missed_counters,),
)
