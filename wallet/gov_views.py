"""What governance answers at `/gov/...`, as typed views (read like the market's, `market_answers.py`).

The CLI and the console's Governance page read proposals, tallies and votes through these, once."""

from __future__ import annotations

import dataclasses
from typing import Any

from trolly.chain.gov.store import OPTION_NAMES

from .market_answers import Address, one_of, parse_answer, plain

STATUSES = ("deposit_period", "voting_period", "passed", "rejected", "failed")
OPTIONS = tuple(OPTION_NAMES.values())


@dataclasses.dataclass(frozen=True)
class ChangeView:
    section: str
    key: str
    value: int


@dataclasses.dataclass(frozen=True)
class TallyView:
    """Bonded utrl behind each option, and the whole bonded stake the quorum is measured against."""

    yes: int
    abstain: int
    no: int
    no_with_veto: int
    total_bonded: int
    voted: int


@dataclasses.dataclass(frozen=True)
class ProposalView:
    id: int
    proposer: Address
    title: str
    summary: str
    changes: tuple[ChangeView, ...]
    status: str = one_of(*STATUSES)
    submit_height: int
    deposit_end_height: int
    total_deposit: int
    voting_start_height: int
    voting_end_height: int
    final_tally: TallyView | None
    outcome: str

    def to_answer(self) -> dict:
        return plain(self)


@dataclasses.dataclass(frozen=True)
class DepositView:
    depositor: Address
    amount: int


@dataclasses.dataclass(frozen=True)
class TallyAnswer:
    """A proposal's tally: live (what it would decide if its vote ended now) or final."""

    proposal_id: int
    status: str = one_of(*STATUSES)
    final: bool
    tally: TallyView
    outcome: str

    def to_answer(self) -> dict:
        return plain(self)


@dataclasses.dataclass(frozen=True)
class VoteView:
    voter: Address
    option: str = one_of(*OPTIONS)


def read_proposals(answer: Any) -> tuple[ProposalView, ...]:
    items = answer.get("proposals") if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        items = [items]  # parse_answer names what is wrong
    return tuple(parse_answer(ProposalView, item, f"/gov/proposals[{i}]") for i, item in enumerate(items))


def read_votes(answer: Any) -> tuple[VoteView, ...]:
    votes = answer.get("votes") if isinstance(answer, dict) else None
    if not isinstance(votes, list):
        votes = [votes]  # parse_answer names what is wrong
    return tuple(parse_answer(VoteView, v, f"/gov/votes[{i}]") for i, v in enumerate(votes))
