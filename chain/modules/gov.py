"""Governance as a chain `Module`: its messages, queries, params, end-block hook and invariants.

Governance changes every module's params, so it is built from the list of their params types
(`governance_module`, called by `app.py` with every other module's), not from a module-level constant: what
a proposal may change is visible where the chain is assembled, and nothing here imports the app.
"""

from __future__ import annotations

import functools

from ..accounts import get_balance
from ..gov.lifecycle import gov_end_block
from ..gov.params import GovParams
from ..gov.queries import QUERIES
from ..gov.store import DEPOSITS, LIVE_STATUSES, VOTING_PERIOD, iterate_deposits, iterate_proposals, iterate_queue
from ..gov.store import iterate_votes
from ..messages.deposit import process_deposit, validate_deposit
from ..messages.submit_proposal import process_submit_proposal, validate_submit_proposal
from ..messages.vote import process_vote, validate_vote
from ..module import InvariantBroken, MessageRoute, Module
from ..proto.gov_pb2 import MsgDeposit, MsgSubmitProposal, MsgVote
from ..state import State


def check_deposits(state: State) -> None:
    """The deposits account holds exactly the deposit records, each of a live proposal whose total they make."""
    totals: dict[int, int] = {}
    for proposal_id, _, amount in iterate_deposits(state):
        totals[proposal_id] = totals.get(proposal_id, 0) + amount
    if get_balance(state, DEPOSITS) != sum(totals.values()):
        raise InvariantBroken(f"gov deposits account holds {get_balance(state, DEPOSITS)}, its records "
                              f"{sum(totals.values())}")
    for proposal in iterate_proposals(state):
        recorded = totals.pop(proposal.id, 0)
        if proposal.status in LIVE_STATUSES and recorded != proposal.total_deposit:
            raise InvariantBroken(f"proposal {proposal.id} totals {proposal.total_deposit}, its records {recorded}")
    if any(totals.values()):
        raise InvariantBroken(f"deposit records of decided or missing proposals {sorted(totals)}")


def check_queue(state: State) -> None:
    """Each live proposal has one queue entry, at the end of its current period; decided ones have none; votes
    exist only for proposals in their voting period."""
    entries = sorted((proposal_id, height) for height, proposal_id in iterate_queue(state))
    expected = sorted((p.id, p.voting_end_height if p.status == VOTING_PERIOD else p.deposit_end_height)
                      for p in iterate_proposals(state) if p.status in LIVE_STATUSES)
    if entries != expected:
        raise InvariantBroken(f"gov queue {entries} disagrees with the live proposals {expected}")
    voting = {p.id for p in iterate_proposals(state) if p.status == VOTING_PERIOD}
    stray = sorted({proposal_id for proposal_id, _, _ in iterate_votes(state)} - voting)
    if stray:
        raise InvariantBroken(f"votes stored for proposals not in their voting period: {stray}")


def governance_module(governed: tuple[type, ...]) -> Module:
    """The gov module, able to change the params of `governed` and its own."""
    param_types = governed + (GovParams,)
    return Module(
        name="gov",
        messages=(
            MessageRoute(MsgSubmitProposal, validate_submit_proposal,
                         functools.partial(process_submit_proposal, param_types=param_types)),
            MessageRoute(MsgDeposit, validate_deposit, process_deposit),
            MessageRoute(MsgVote, validate_vote, process_vote),
        ),
        queries=QUERIES,
        params=(GovParams,),
        end_block=functools.partial(gov_end_block, param_types=param_types),
        invariants=(check_deposits, check_queue),
    )
