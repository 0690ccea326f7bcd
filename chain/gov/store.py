"""Governance's records and the named verbs over them: proposals, deposits, votes and the end-of-period queue.

A proposal is stored as canonical JSON under its id. While it is live (collecting deposits, or voting) it has
exactly one queue entry, at the height whose end-block closes its current period; its deposits sit in the
`DEPOSITS` module account, one record per depositor, and its votes one record per voter. When it is decided
its deposits are refunded or burned and its votes deleted; the proposal itself stays, with its final tally.
A proposal whose deposit period ends short of the minimum is deleted (as in the anchor).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Iterator

from .. import keys
from ..accounts import burn, move_funds
from ..codec import canonical_json, decode_u64, encode_u64
from ..crypto import encode_address, module_address
from ..state import State
from .errors import ProposalNotFound

DEPOSITS = module_address("gov_deposits")
"""The module account holding every live proposal's deposits."""

DEPOSIT_PERIOD = "deposit_period"
VOTING_PERIOD = "voting_period"
PASSED = "passed"
REJECTED = "rejected"
FAILED = "failed"
"""A proposal's status: collecting deposits, voting, then passed (changes applied), rejected by the tally, or
failed (it passed, but its changes no longer held when applied: nothing was applied)."""
LIVE_STATUSES = (DEPOSIT_PERIOD, VOTING_PERIOD)

YES, ABSTAIN, NO, NO_WITH_VETO = 1, 2, 3, 4
"""Vote options, numbered as the anchor's `VoteOption` (and `gov.proto`)."""
OPTION_NAMES = {YES: "yes", ABSTAIN: "abstain", NO: "no", NO_WITH_VETO: "no_with_veto"}


@dataclass(frozen=True)
class Tally:
    """Bonded stake (utrl) behind each option, and the whole bonded stake it is measured against."""

    yes: int = 0
    abstain: int = 0
    no: int = 0
    no_with_veto: int = 0
    total_bonded: int = 0

    @property
    def voted(self) -> int:
        return self.yes + self.abstain + self.no + self.no_with_veto


@dataclass(frozen=True)
class Proposal:
    id: int
    proposer: str
    title: str
    summary: str
    changes: tuple[tuple[str, str, int], ...]
    """(section, key, value) of each param change; empty for a text proposal."""
    status: str
    submit_height: int
    deposit_end_height: int
    total_deposit: int = 0
    voting_start_height: int = 0
    voting_end_height: int = 0
    final_tally: Tally | None = None
    outcome: str = ""
    """What decided it, in words (the rule that rejected it, or why its changes could not be applied)."""

    def to_json(self) -> dict:
        value = dataclasses.asdict(self)
        value["changes"] = [{"section": s, "key": k, "value": v} for s, k, v in self.changes]
        return value

    @classmethod
    def from_json(cls, value: dict) -> "Proposal":
        changes = tuple((c["section"], c["key"], c["value"]) for c in value["changes"])
        tally = value["final_tally"]
        return cls(**{**value, "changes": changes, "final_tally": None if tally is None else Tally(**tally)})


# -- proposals -----------------------------------------------------------------------------------------------
def next_proposal_id(state: State) -> int:
    """Ids start at 1 and are never reused."""
    raw = state.get(keys.GOV_NEXT_PROPOSAL_ID)
    proposal_id = 1 if raw is None else decode_u64(raw)
    state.set(keys.GOV_NEXT_PROPOSAL_ID, encode_u64(proposal_id + 1))
    return proposal_id


def find_proposal(state: State, proposal_id: int) -> Proposal | None:
    raw = state.get(keys.gov_proposal_key(proposal_id))
    return None if raw is None else Proposal.from_json(json.loads(raw))


def get_proposal(state: State, proposal_id: int) -> Proposal:
    proposal = find_proposal(state, proposal_id)
    if proposal is None:
        raise ProposalNotFound(f"no proposal {proposal_id} (never submitted, or deleted when its deposit period "
                               "ended below gov.min_deposit)")
    return proposal


def put_proposal(state: State, proposal: Proposal) -> None:
    state.set(keys.gov_proposal_key(proposal.id), canonical_json(proposal.to_json()))


def delete_proposal(state: State, proposal_id: int) -> None:
    state.delete(keys.gov_proposal_key(proposal_id))


def iterate_proposals(state: State) -> Iterator[Proposal]:
    """Every stored proposal, ascending by id."""
    for _, raw in state.iterate(keys.GOV_PROPOSAL):
        yield Proposal.from_json(json.loads(raw))


# -- the queue of period ends ----------------------------------------------------------------------------------
def schedule(state: State, end_height: int, proposal_id: int) -> None:
    state.set(keys.gov_queue_key(end_height, proposal_id), b"")


def unschedule(state: State, end_height: int, proposal_id: int) -> None:
    state.delete(keys.gov_queue_key(end_height, proposal_id))


def due_proposals(state: State, height: int) -> list[tuple[int, int]]:
    """(end height, proposal id) of every period ending at or before `height`, in order; reads only those."""
    due = []
    for key, _ in state.iterate(keys.GOV_QUEUE):
        end_height, proposal_id = decode_u64(key[1:9]), decode_u64(key[9:17])
        if end_height > height:
            break
        due.append((end_height, proposal_id))
    return due


def iterate_queue(state: State) -> Iterator[tuple[int, int]]:
    for key, _ in state.iterate(keys.GOV_QUEUE):
        yield decode_u64(key[1:9]), decode_u64(key[9:17])


# -- deposits --------------------------------------------------------------------------------------------------
def add_deposit(state: State, proposal_id: int, depositor: bytes, amount: int) -> None:
    """Move `amount` from `depositor` into the deposits account (InsufficientFunds before any change)."""
    move_funds(state, depositor, DEPOSITS, amount)
    key = keys.gov_deposit_key(proposal_id, depositor)
    raw = state.get(key)
    state.set(key, encode_u64((0 if raw is None else decode_u64(raw)) + amount))


def deposits_of(state: State, proposal_id: int) -> list[tuple[bytes, int]]:
    """(depositor, utrl) of a live proposal, ascending by depositor."""
    prefix = keys.GOV_DEPOSIT + keys.u64(proposal_id)
    return [(key[len(prefix):], decode_u64(raw)) for key, raw in state.iterate(prefix)]


def iterate_deposits(state: State) -> Iterator[tuple[int, bytes, int]]:
    for key, raw in state.iterate(keys.GOV_DEPOSIT):
        yield decode_u64(key[1:9]), key[9:], decode_u64(raw)


def settle_deposits(state: State, proposal_id: int, burn_them: bool) -> list[tuple[str, int]]:
    """Refund every deposit of a proposal to its depositor, or burn them all; delete the records. Returns the
    (depositor address, utrl) settled, for the events."""
    settled = []
    for depositor, amount in deposits_of(state, proposal_id):
        if burn_them:
            burn(state, DEPOSITS, amount)
        else:
            move_funds(state, DEPOSITS, depositor, amount)
        state.delete(keys.gov_deposit_key(proposal_id, depositor))
        settled.append((encode_address(depositor), amount))
    return settled


# -- votes -----------------------------------------------------------------------------------------------------
def set_vote(state: State, proposal_id: int, voter: bytes, option: int) -> bool:
    """Record `voter`'s option, replacing any earlier vote; True when it replaced one."""
    key = keys.gov_vote_key(proposal_id, voter)
    replaced = state.has(key)
    state.set(key, bytes([option]))
    return replaced


def votes_of(state: State, proposal_id: int) -> dict[bytes, int]:
    """voter -> option of a proposal in its voting period."""
    prefix = keys.GOV_VOTE + keys.u64(proposal_id)
    return {key[len(prefix):]: raw[0] for key, raw in state.iterate(prefix)}


def delete_votes(state: State, proposal_id: int) -> None:
    for voter in list(votes_of(state, proposal_id)):
        state.delete(keys.gov_vote_key(proposal_id, voter))


def iterate_votes(state: State) -> Iterator[tuple[int, bytes, int]]:
    for key, raw in state.iterate(keys.GOV_VOTE):
        yield decode_u64(key[1:9]), key[9:], raw[0]
