"""When a round's votes leave the state: once nothing the chain's rules do can read them again.

A verdict vote (`records.Vote`, with its replay commitment and, once revealed, its replay digest) is read while
its segment is verified (the tally, the duplicate check), while its round's reveal window is open (the reveal,
checked against the commitment) and when that window closes (`reveals.settle_reveals`: lazy, absent and losing
voters, the verifier fee's earners, the held slash shares, the heights their penalties reach back to). After
that no message, end-block step or slash reads it: the segment's decision and the round's outcome stay on the
commitment, and what each voter earned or lost is in the balances, the slash records and the events. So the
reveal window's close deletes the round's votes (`delete_read_votes`), in the same end block that read them
for the last time: what it deletes is what it has just read, so deleting costs that block no more than the
reading already did (a few times the reads' key lookups, never a scan), and no block deletes more votes than
the rounds whose windows close in it hold.

A round that ends without a reveal window (a task cancelled while its final report is being verified) leaves
its votes with nobody to settle them: the task's end deletes them (`forget_unsettled_votes`), bounded by that
round's members, sampled segments and committees.

Queries answer a deleted round's commitments with no verdicts and say so (`votes_deleted`); the decisions,
outcome, committees and pay stay on the commitment.
"""

from __future__ import annotations

from ..state import State
from .records import LIVE_STATUSES, Commitment, Task, Vote
from .store import delete_vote, iter_round_commitments
from .tally import committee_votes


def delete_read_votes(state: State, commitment: Commitment, votes: dict[int, list[tuple[bytes, Vote]]]) -> None:
    """Delete the commitment's votes the reveal window's close read: (validator, vote) by sampled segment."""
    for segment, segment_votes in votes.items():
        for validator, _ in segment_votes:
            delete_vote(state, commitment.task_id, commitment.round, commitment.worker, segment, validator)


def forget_unsettled_votes(state: State, task: Task) -> None:
    """At the task's end, delete the votes of its current round when that round will have no reveal window (it
    never settled); a settled round's votes wait for its window's close, which comes even after the task ended."""
    if any(round_ == task.round for _, round_ in task.reveals_due):
        return
    for commitment in iter_round_commitments(state, task, task.round):
        delete_read_votes(state, commitment, {segment: committee_votes(state, commitment, segment)
                                              for segment in commitment.segments})


def votes_deleted(task: Task, commitment: Commitment) -> bool:
    """Whether the commitment's votes have been deleted: its round's reveal window closed, or its task ended
    before the round settled (a commitment with no sampled segment had none)."""
    if not commitment.segments:
        return False
    if commitment.reveal_deadline:
        return [commitment.reveal_deadline, commitment.round] not in task.reveals_due
    return task.status not in LIVE_STATUSES
