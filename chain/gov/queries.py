"""Governance queries: proposals, one proposal with its deposits, its tally (live while it is voting), its votes."""

from __future__ import annotations

import dataclasses

from .. import keys
from ..crypto import encode_address
from ..errors import InvalidRequest
from ..module import QueryResult, QueryRoute
from ..params import get_params
from ..state import State
from .params import GovParams
from .store import OPTION_NAMES, VOTING_PERIOD, Proposal, Tally, deposits_of, get_proposal, iterate_proposals
from .store import votes_of
from .tally import decide, tally_votes, voting_stakes


def _proposal_id(arg: str) -> int:
    if not (0 < len(arg) <= 20 and arg.isascii() and arg.isdigit()):
        raise InvalidRequest(f"proposal id must be a positive integer, got {arg[:40]!r}")
    return int(arg)


def tally_json(tally: Tally) -> dict:
    return {**dataclasses.asdict(tally), "voted": tally.voted}


def proposal_json(proposal: Proposal) -> dict:
    value = proposal.to_json()
    value["final_tally"] = None if proposal.final_tally is None else tally_json(proposal.final_tally)
    return value


def query_proposals(state: State, arg: str, data: bytes) -> QueryResult:
    if arg:
        raise InvalidRequest("/gov/proposals takes no argument; use /gov/proposal/<id>")
    return QueryResult({"proposals": [proposal_json(p) for p in iterate_proposals(state)]})


def query_proposal(state: State, arg: str, data: bytes) -> QueryResult:
    proposal = get_proposal(state, _proposal_id(arg))
    deposits = [{"depositor": encode_address(d), "amount": a} for d, a in deposits_of(state, proposal.id)]
    return QueryResult({**proposal_json(proposal), "deposits": deposits},
                       proof_key=keys.gov_proposal_key(proposal.id))


def query_tally(state: State, arg: str, data: bytes) -> QueryResult:
    """While voting: the tally if the period ended now, and what it would decide; after: the final tally."""
    proposal = get_proposal(state, _proposal_id(arg))
    if proposal.status != VOTING_PERIOD:
        tally = proposal.final_tally or Tally()
        return QueryResult({"proposal_id": proposal.id, "status": proposal.status, "final": True,
                            "tally": tally_json(tally), "outcome": proposal.outcome})
    tally = tally_votes(voting_stakes(state), votes_of(state, proposal.id))
    decision = decide(tally, get_params(state, GovParams))
    return QueryResult({"proposal_id": proposal.id, "status": proposal.status, "final": False,
                        "tally": tally_json(tally), "outcome": f"if it ended now: {decision.reason}",
                        "voting_end_height": proposal.voting_end_height})


def query_votes(state: State, arg: str, data: bytes) -> QueryResult:
    proposal = get_proposal(state, _proposal_id(arg))
    votes = [{"voter": encode_address(voter), "option": OPTION_NAMES[option]}
             for voter, option in votes_of(state, proposal.id).items()]
    return QueryResult({"proposal_id": proposal.id, "votes": votes})


QUERIES = (
    QueryRoute("/gov/proposals", query_proposals, "every proposal (decided ones with their final tally)"),
    QueryRoute("/gov/proposal", query_proposal, "one proposal with its deposits: /gov/proposal/<id>"),
    QueryRoute("/gov/tally", query_tally, "a proposal's tally, live while it votes: /gov/tally/<id>"),
    QueryRoute("/gov/votes", query_votes, "the votes cast so far on a proposal in its voting period: /gov/votes/<id>"),
)
