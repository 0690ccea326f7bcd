"""A proposal's life after submission: the start of its vote, the end of its deposit period, its tally.

Each live proposal has one queue entry at the height whose end-block closes its current period
(`store.schedule`); `gov_end_block` reads only the entries due. A deposit period that ends short of
`min_deposit` deletes the proposal and refunds its deposits (burns them with `burn_proposal_deposit_prevote`).
A voting period's end tallies the votes (`tally`), applies a passed proposal's changes all or nothing
(`changes.apply_changes`, which checks them again against the params of that moment), refunds or burns the
deposits and deletes the votes. Every outcome is an event.
"""

from __future__ import annotations

import dataclasses

from ..block import BlockContext, Event
from ..errors import ChainError
from ..params import get_params
from ..state import State
from .changes import apply_changes
from .params import GovParams
from .store import FAILED, PASSED, REJECTED, VOTING_PERIOD, Proposal, delete_proposal, delete_votes
from .store import due_proposals, get_proposal, put_proposal, schedule, settle_deposits, unschedule, votes_of
from .tally import decide, tally_votes, voting_stakes


def start_voting_if_funded(state: State, ctx: BlockContext, proposal: Proposal, params: GovParams) -> Proposal:
    """Move a proposal in its deposit period whose deposits reached `min_deposit` to its voting period."""
    if proposal.status == VOTING_PERIOD or proposal.total_deposit < params.min_deposit:
        return proposal
    height = ctx.env.height
    unschedule(state, proposal.deposit_end_height, proposal.id)
    proposal = dataclasses.replace(proposal, status=VOTING_PERIOD, voting_start_height=height,
                                   voting_end_height=height + params.voting_period_blocks)
    schedule(state, proposal.voting_end_height, proposal.id)
    ctx.emit(Event.of("proposal_voting_started", proposal_id=proposal.id, voting_end_height=proposal.voting_end_height))
    return proposal


def _settle(state: State, ctx: BlockContext, proposal_id: int, burn_them: bool) -> None:
    kind = "deposit_burned" if burn_them else "deposit_refunded"
    for depositor, amount in settle_deposits(state, proposal_id, burn_them):
        ctx.emit(Event.of(kind, proposal_id=proposal_id, depositor=depositor, amount=amount))


def end_deposit_period(state: State, ctx: BlockContext, proposal: Proposal, params: GovParams) -> None:
    """The deposits stayed short of `min_deposit`: delete the proposal, refund (or burn) its deposits."""
    burn_them = params.burn_proposal_deposit_prevote == 1
    _settle(state, ctx, proposal.id, burn_them)
    delete_proposal(state, proposal.id)
    ctx.emit(Event.of("proposal_dropped", proposal_id=proposal.id, total_deposit=proposal.total_deposit,
                      deposits="burned" if burn_them else "refunded",
                      reason=f"deposits {proposal.total_deposit}utrl below gov.min_deposit {params.min_deposit}utrl "
                             "when the deposit period ended"))


def end_voting_period(state: State, ctx: BlockContext, proposal: Proposal, params: GovParams,
                      param_types: tuple[type, ...]) -> None:
    """Tally, apply a passed proposal's changes (all or none), settle the deposits, delete the votes."""
    tally = tally_votes(voting_stakes(state), votes_of(state, proposal.id))
    decision = decide(tally, params)
    status, outcome = (PASSED, decision.reason) if decision.passed else (REJECTED, decision.reason)
    if decision.passed and proposal.changes:
        before = state.snapshot()
        try:
            apply_changes(state, param_types, proposal.changes)
        except ChainError as error:  # the params changed meanwhile: the proposal fails whole
            state.rollback(before)
            status, outcome = FAILED, f"passed, but its changes no longer hold: {error.log}"
    _settle(state, ctx, proposal.id, decision.burn_deposits)
    delete_votes(state, proposal.id)
    put_proposal(state, dataclasses.replace(proposal, status=status, final_tally=tally, outcome=outcome))
    if status == PASSED:
        for section, key, value in proposal.changes:
            ctx.emit(Event.of("param_changed", proposal_id=proposal.id, section=section, key=key, value=value))
    ctx.emit(Event.of(f"proposal_{status}", proposal_id=proposal.id, yes=tally.yes, abstain=tally.abstain,
                      no=tally.no, no_with_veto=tally.no_with_veto, total_bonded=tally.total_bonded, reason=outcome))


def gov_end_block(state: State, ctx: BlockContext, param_types: tuple[type, ...]) -> None:
    """Close every period ending at this height (read once per block: no entry is due in most blocks)."""
    due = due_proposals(state, ctx.env.height)
    if not due:
        return
    params = get_params(state, GovParams)
    for end_height, proposal_id in due:
        unschedule(state, end_height, proposal_id)
        proposal = get_proposal(state, proposal_id)
        if proposal.status == VOTING_PERIOD:
            end_voting_period(state, ctx, proposal, params, param_types)
        else:
            end_deposit_period(state, ctx, proposal, params)
