"""Verdict tallies by the power of a segment's committee (docs/protocol.md section 4).

A sampled segment is decided the moment one side holds two thirds of its committee's power (the current power
of the validators drawn for it), compared in integers (3 * votes >= 2 * total): PASS votes decide `pass`; FAIL and UNAVAILABLE votes together decide `fail` (a
checkpoint that is not served cannot be checked, and a worker must not profit from hiding it; but only FAIL
voters share the slash that follows, see `slash_voters`). Power is read
when the tally runs, so a validator that lost its power no longer counts. One decided `fail` fails the
worker's round; all segments decided `pass` pass it.
"""

from __future__ import annotations

from ..state import State
from .power import operator_power
from .records import FAILED, PASSED, PENDING, SEGMENT_FAIL, SEGMENT_PASS, UNDECIDED, VERDICT_PASS, VERDICT_UNAVAILABLE
from .records import Commitment
from .store import segment_votes, unmark_pending


def has_two_thirds(votes: int, total: int) -> bool:
    return total > 0 and 3 * votes >= 2 * total


def committee_of(commitment: Commitment, segment: int) -> list[bytes]:
    """The operators on the committee of one of the commitment's sampled segments."""
    return [bytes.fromhex(member) for member in commitment.committees[commitment.segments.index(segment)]]


def tally_segment(state: State, commitment: Commitment, segment: int) -> str:
    """`pass`, `fail` or `undecided` for one segment, from its committee's votes and current powers."""
    committee = committee_of(commitment, segment)
    passing = adverse = 0
    for validator, vote in segment_votes(state, commitment.task_id, commitment.round, commitment.worker, segment):
        if validator not in committee:
            continue  # a member of an earlier, smaller committee that was not drawn again (cannot happen today)
        power = operator_power(state, validator)
        if vote.verdict == VERDICT_PASS:
            passing += power
        else:
            adverse += power
    total = sum(operator_power(state, member) for member in committee)
    if has_two_thirds(adverse, total):
        return SEGMENT_FAIL
    if has_two_thirds(passing, total):
        return SEGMENT_PASS
    return UNDECIDED


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


def deciding_voters(state: State, commitment: Commitment, want_pass: bool) -> list[tuple[bytes, int]]:
    """Validators (with current power) who voted on the commitment's decided segments on the winning side:
    PASS voters of a passed round, FAIL/UNAVAILABLE voters of the failed segments of a failed one."""
    return [(validator, power) for validator, power, _ in _winning_votes(state, commitment, want_pass)]


def slash_voters(state: State, commitment: Commitment) -> list[tuple[bytes, int, bool]]:
    """(validator, current power, replayed) of every validator whose adverse votes decided a failed
    commitment, ascending; `replayed` is True when one of them is a FAIL (a replay that found the fault), False
    when all are UNAVAILABLE (nothing was replayed). Only replayed voters earn a share of the slash, so that
    calling a worker unavailable, which anyone able to flood its blob port can make true, pays nobody."""
    return _winning_votes(state, commitment, want_pass=False)


def _winning_votes(state: State, commitment: Commitment, want_pass: bool) -> list[tuple[bytes, int, bool]]:
    wanted = SEGMENT_PASS if want_pass else SEGMENT_FAIL
    voters: dict[bytes, tuple[int, bool]] = {}
    for segment, decision in zip(commitment.segments, commitment.decisions):
        if decision != wanted:
            continue
        for validator, vote in segment_votes(state, commitment.task_id, commitment.round, commitment.worker, segment):
            if (vote.verdict == VERDICT_PASS) == want_pass:
                replayed = vote.verdict != VERDICT_UNAVAILABLE or voters.get(validator, (0, False))[1]
                voters[validator] = (operator_power(state, validator), replayed)
    return sorted((validator, power, replayed) for validator, (power, replayed) in voters.items())


def round_undecided(commitments: list[Commitment]) -> bool:
    return any(c.outcome == PENDING for c in commitments)
