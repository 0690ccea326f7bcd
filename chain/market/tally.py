"""Verdict tallies: a committee decides alone only when it is unanimous; a dispute goes to the whole validator set
(docs/protocol.md section 4.4).

No set of validators holding under a third of the power may decide a verdict. Sampling alone cannot give that:
a committee of 7 drawn by stake holds 5 or more members of a one-third coalition several percent of the time, so
two thirds of a committee is no safeguard. So a sampled committee decides a segment alone only when nobody on
it dissents: once every member voted the same way, or, when the verification window closes, when the members
that voted all voted the same way and hold two thirds of the committee's power (so that one absent member does
not send every segment to the whole set). Any dissent, which one honest member can always raise, leaves the
segment undecided, and when the window closes it escalates to the whole validator set (the worker aside,
`round_lifecycle.escalate_to_whole_set`), whose members all verify it in a fresh window: it is decided the
moment one side holds two thirds of that set's power, which a coalition under a third can neither reach nor
block from being reached by the others. A committee that already is the whole set decides so from the start.

PASS votes decide `pass`; FAIL and UNAVAILABLE votes together decide `fail` (a checkpoint that is not served
cannot be checked, and a worker must not profit from hiding it; but only FAIL voters share the slash that
follows, see `slash_voters`). Whoever voted PASS or FAIL against what the whole set decided pays
(`losing_voters`, `reveals.settle_reveals`). Power is read when the tally runs, so a validator that lost its
power no longer counts, nor does its dissent. One decided `fail` fails the worker's round; all segments decided
`pass` pass it.
"""

from __future__ import annotations

from typing import Iterable

from .. import keys
from ..block import BlockContext
from ..state import State
from .power import operator_power, power_reader, shared_power
from .records import FAILED, PASSED, PENDING, SEGMENT_FAIL, SEGMENT_PASS, UNDECIDED, VERDICT_FAIL, VERDICT_PASS
from .records import VERDICT_UNAVAILABLE, Commitment, Vote
from .store import unmark_pending, votes_of


def has_two_thirds(votes: int, total: int) -> bool:
    return total > 0 and 3 * votes >= 2 * total


def committee_of(commitment: Commitment, segment: int) -> list[bytes]:
    """The operators on the committee of one of the commitment's sampled segments."""
    return [bytes.fromhex(member) for member in commitment.committees[commitment.segments.index(segment)]]


def committee_votes(state: State, commitment: Commitment, segment: int) -> list[tuple[bytes, Vote]]:
    """Every vote on one of the commitment's sampled segments, ascending by validator: what `store.segment_votes`
    finds, read by key over the segment's committee (only its members vote, `MsgSubmitVerdict`) rather than by a
    scan, which in a block that deletes votes would walk every deletion before it (`State.iterate`)."""
    return votes_of(state, commitment.task_id, commitment.round, commitment.worker, segment,
                    committee_of(commitment, segment))


def is_whole_set(commitment: Commitment, segment: int) -> bool:
    """Whether the segment is decided by the whole validator set (escalated, or drawn so)."""
    return bool(commitment.escalated[commitment.segments.index(segment)])


def tally_segment(state: State, commitment: Commitment, segment: int, closing: bool = False,
                  ctx: BlockContext | None = None) -> str:
    """`pass`, `fail` or `undecided` for one segment, from its committee's votes and current powers; `closing`
    when the verification window closes (a unanimous committee whose voters hold two thirds then decides). With
    `ctx`, the members' validator records and votes are read shared (`power.shared_power`, `store.votes_of`),
    each decoded once per block: a block of verdicts tallies a segment at each of its votes."""
    committee = committee_of(commitment, segment)
    if ctx is None:
        powers = {member: operator_power(state, member) for member in committee}
    else:
        powers = {member: shared_power(state, ctx, member) for member in committee}
    passing = adverse = 0
    voted: set[bytes] = set()
    for validator, vote in votes_of(state, commitment.task_id, commitment.round, commitment.worker, segment, committee,
                                    ctx):
        power = powers.get(validator, 0)
        if not power:
            continue  # no longer a validator with power
        voted.add(validator)
        if vote.verdict == VERDICT_PASS:
            passing += power
        else:
            adverse += power
    total = sum(powers.values())
    if is_whole_set(commitment, segment):
        if has_two_thirds(adverse, total):
            return SEGMENT_FAIL
        return SEGMENT_PASS if has_two_thirds(passing, total) else UNDECIDED
    if passing and adverse:
        return UNDECIDED  # a dissent: the whole set decides (`round_lifecycle.escalate_to_whole_set`)
    everyone = all(member in voted for member, power in powers.items() if power)
    if total and (everyone or (closing and has_two_thirds(passing + adverse, total))):
        return SEGMENT_PASS if passing else SEGMENT_FAIL
    return UNDECIDED


def awaiting_votes(state: State, ctx: BlockContext, commitment: Commitment, segment: int) -> bool:
    """Whether a sampled committee (not the whole set) still waits for the vote of a member with power: then
    `tally_segment` answers `undecided` before the window closes, whatever the votes so far say (a dissent leaves
    it undecided too), so a block of verdicts need not tally the segment at each of its committee's first votes.
    Reads stop at the first such member; the vote that completes the committee reads all and is tallied."""
    if is_whole_set(commitment, segment):
        return False  # two thirds of the whole set may decide before everyone voted
    prefix = keys.market_segment_votes_prefix(commitment.task_id, commitment.round, commitment.worker, segment)
    for member in committee_of(commitment, segment):
        if state.get(prefix + member) is None and shared_power(state, ctx, member) > 0:
            return True
    return False


def on_committee(commitment: Commitment, segment: int, operator: bytes) -> bool:
    """Whether `operator` sits on the committee of the commitment's sampled `segment` (which must be one)."""
    return operator.hex() in commitment.committees[commitment.segments.index(segment)]


def losing_voters(commitment: Commitment, segment: int, votes: list[tuple[bytes, Vote]]) -> list[tuple[bytes, Vote]]:
    """The PASS and FAIL voters (among `votes`, every vote on the segment) on the losing side of a segment the whole
    validator set decided, ascending. An UNAVAILABLE voter is not among them: a worker can serve its blobs to some verifiers and not to others, and
    must not be able to make an honest one pay."""
    index = commitment.segments.index(segment)
    decision = commitment.decisions[index]
    if not commitment.escalated[index] or decision == UNDECIDED:
        return []
    losing = VERDICT_FAIL if decision == SEGMENT_PASS else VERDICT_PASS
    return [(validator, vote) for validator, vote in votes if vote.verdict == losing]


def apply_decision(state: State, commitment: Commitment, segment: int, decision: str) -> None:
    """Record a segment's decision on its commitment and update the worker's round outcome."""
    commitment.decisions[commitment.segments.index(segment)] = decision
    unmark_pending(state, commitment.task_id, commitment.round, commitment.worker, segment)
    if decision == SEGMENT_FAIL:
        commitment.outcome = FAILED
        # The round has failed: its other segments no longer need verdicts.
        for other, other_decision in zip(commitment.segments, commitment.decisions):
            if other_decision == UNDECIDED:
                unmark_pending(state, commitment.task_id, commitment.round, commitment.worker, other)
    elif all(d == SEGMENT_PASS for d in commitment.decisions):
        commitment.outcome = PASSED


def deciding_voters(state: State, commitment: Commitment, want_pass: bool,
                    votes: dict[int, list[tuple[bytes, Vote]]] | None = None,
                    ctx: BlockContext | None = None) -> list[tuple[bytes, int]]:
    """Validators (with current power) who voted on the commitment's decided segments on the winning side:
    PASS voters of a passed round, FAIL/UNAVAILABLE voters of the failed segments of a failed one. `votes`: each
    segment's votes when the caller read them already (else read here, `committee_votes`); with `ctx`, powers are
    read shared (`power.power_reader`)."""
    return [(validator, power) for validator, power, _ in _winning_votes(state, commitment, want_pass, votes, ctx)]


def slash_voters(state: State, commitment: Commitment) -> list[tuple[bytes, int, bool]]:
    """(validator, current power, replayed) of every validator whose adverse votes decided a failed
    commitment, ascending; `replayed` is True when one of them is a FAIL (a replay that found the fault), False
    when all are UNAVAILABLE (nothing was replayed). Only replayed voters earn a share of the slash, so that
    calling a worker unavailable, which anyone able to flood its blob port can make true, pays nobody."""
    return _winning_votes(state, commitment, want_pass=False)


def _winning_votes(state: State, commitment: Commitment, want_pass: bool,
                   votes: dict[int, list[tuple[bytes, Vote]]] | None = None,
                   ctx: BlockContext | None = None) -> list[tuple[bytes, int, bool]]:
    wanted = SEGMENT_PASS if want_pass else SEGMENT_FAIL
    power = power_reader(state, ctx)
    voters: dict[bytes, tuple[int, bool]] = {}
    for segment, decision in zip(commitment.segments, commitment.decisions):
        if decision != wanted:
            continue
        for validator, vote in committee_votes(state, commitment, segment) if votes is None else votes[segment]:
            if (vote.verdict == VERDICT_PASS) == want_pass:
                replayed = vote.verdict != VERDICT_UNAVAILABLE or voters.get(validator, (0, False))[1]
                voters[validator] = (power(validator), replayed)
    return sorted((validator, power, replayed) for validator, (power, replayed) in voters.items())


def round_undecided(commitments: Iterable[Commitment]) -> bool:
    """Whether any of `commitments` is still pending; reads no further than the first that is (pass a generator,
    `store.iter_round_commitments`, to decode no more than that)."""
    return any(c.outcome == PENDING for c in commitments)
