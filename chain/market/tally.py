"""Verdict tallies by the power of a segment's committee (docs/protocol.md section 4).

A sampled segment is decided the moment one side holds two thirds of its committee's power (the current power
of the validators drawn for it), compared in integers (3 * votes >= 2 * total): PASS votes decide `pass`; FAIL and UNAVAILABLE votes together decide `fail` (a
checkpoint that is not served cannot be checked, and a worker must not profit from hiding it). Power is read
when the tally runs, so a validator that lost its power no longer counts. One decided `fail` fails the
worker's round; all segments decided `pass` pass it.
"""

from __future__ import annotations

from ..state import State
from .power import operator_power
from .records import FAILED, PASSED, PENDING, SEGMENT_FAIL, SEGMENT_PASS, UNDECIDED, VERDICT_PASS, Commitment
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
    wanted = SEGMENT_PASS if want_pass else SEGMENT_FAIL
    voters: dict[bytes, int] = {}
    for segment, decision in zip(commitment.segments, commitment.decisions):
        if decision != wanted:
            continue
        for validator, vote in segment_votes(state, commitment.task_id, commitment.round, commitment.worker, segment):
            if (vote.verdict == VERDICT_PASS) == want_pass:
                voters[validator] = operator_power(state, validator)
    return sorted(voters.items())


def round_undecided(commitments: list[Commitment]) -> bool:
    return any(c.outcome == PENDING for c in commitments)
