"""Why a worker was not paid for a task: `trolly-worker why TASK`.

Read from the chain's record of the task (`wallet.market_views.TaskView`): each round this worker was a member
of, what it committed and how its commitment was decided; for a commitment that was not paid, each sampled
segment with every validator's verdict and what that verdict means, and the command that replays the segment
as a verifier does (`trolly-verifier replay`, which prints the verifier's reason with its numbers: the chain
keeps each vote's verdict and evidence hash, not the verifier's words); rounds it missed (no commitment before
the round's deadline) and what its membership ended with (dropped, slashed, the penalty and its reason).
"""

from __future__ import annotations

import dataclasses

from trolly.chain.market.records import (ACTIVE, DISAGREED, DROPPED, FAILED, PASSED, PENDING, SLASHED, UNDECIDED,
                                         UNVERIFIED)
from trolly.wallet.market_views import Commitment, TaskView

VERDICT_MEANINGS = {
    "pass": "replayed the segment from your checkpoints and got your next checkpoint",
    "fail": "replayed the segment (or checked its claims, start or update) and did not get what you committed",
    "unavailable": "could not fetch the segment's checkpoints or update from your blob service",
}

OUTCOME_MEANINGS = {
    PASSED: "verified: paid by the samples it processed",
    FAILED: "a sampled segment was decided FAIL: the collateral was slashed, no pay",
    UNVERIFIED: "no sampled segment reached two thirds of its committee's power before the verification window "
                "closed: no pay, no slash",
    DISAGREED: "its start weights were not the ones the other members agreed on: no pay",
    PENDING: "still being verified",
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing that explains the pay of one round (or of the membership: round -1)."""

    round: int
    what: str
    details: tuple[str, ...] = ()


def _segment_lines(view: TaskView, round_index: int, address: str, commitment: Commitment) -> list[str]:
    lines = []
    for position, segment in enumerate(commitment.segments):
        decision = commitment.decisions[position] if position < len(commitment.decisions) else UNDECIDED
        votes = [vote for vote in commitment.verdicts if vote.segment == segment]
        committee = len(commitment.committees[position]) if position < len(commitment.committees) else len(votes)
        lines.append(f"segment {segment}: {decision}, {len(votes)} vote(s) of a committee of {committee}")
        for vote in votes:
            lines.append(f"  {vote.validator} voted {vote.verdict.upper()} at height {vote.height}: "
                         f"{VERDICT_MEANINGS.get(vote.verdict, vote.verdict)}")
        if any(vote.verdict != "pass" for vote in votes) or decision != "pass":
            lines.append(f"  the verifier's reason: trolly-verifier replay --task {view.id} --round {round_index} "
                         f"--worker {address} --segment {segment}")
    return lines


def explain_task(view: TaskView, address: str) -> list[Finding]:
    """What the chain says about `address` on task `view`, round by round; an empty list for a member paid for
    every round it committed and not deducted anything."""
    member = view.member(address)
    if member is None:
        return [Finding(-1, f"this worker is not a member of task {view.id} (status {view.status}): it never "
                            f"joined, or its join was refused")]
    findings = []
    for detail in view.round_details:
        commitment = detail.commitment_of(address)
        finished = detail.round < view.round or view.status not in ("open", "running")
        if commitment is None:
            left_before = member.status != ACTIVE and (detail.round > member.left_round or (
                detail.round == member.left_round and member.reason == "left"))  # left at will: missed nothing
            if finished and not left_before and detail.round >= _first_round(view, address):
                findings.append(Finding(detail.round, "no commitment before the round's deadline: missed"))
            continue
        if detail.final_report:
            if commitment.outcome not in (PASSED, PENDING):
                findings.append(Finding(detail.round, f"final report {commitment.outcome}: "
                                        f"{OUTCOME_MEANINGS.get(commitment.outcome, '')}",
                                        tuple(_segment_lines(view, detail.round, address, commitment))))
            continue
        if commitment.outcome == PASSED and commitment.paid:
            continue
        what = f"{commitment.outcome}, paid {commitment.paid} utrl: {OUTCOME_MEANINGS.get(commitment.outcome, '')}"
        findings.append(Finding(detail.round, what, tuple(_segment_lines(view, detail.round, address, commitment))))
    if member.status in (DROPPED, SLASHED):
        lost = member.penalized if member.status == DROPPED else member.slashed
        kind = "penalty" if member.status == DROPPED else "slash"
        findings.append(Finding(member.left_round, f"{member.status} in round {member.left_round} "
                                f"({member.reason}): {kind} of {lost} utrl from its collateral"))
    return findings


def _first_round(view: TaskView, address: str) -> int:
    """The first round `address` committed in (a replacement joins a running task later), else 0."""
    rounds = [d.round for d in view.round_details if d.commitment_of(address) is not None]
    return min(rounds) if rounds else 0


def finding_lines(view: TaskView, address: str, findings: list[Finding]) -> list[str]:
    member = view.member(address)
    head = f"task {view.id} ({view.status}), worker {address}"
    if member is not None:
        head += (f": member {member.index}, {member.status}, paid {member.paid} utrl for {member.rounds_passed} "
                 f"verified round(s), penalized {member.penalized}, slashed {member.slashed}")
    lines = [head]
    if not findings:
        lines.append("nothing unpaid: every round it committed was verified and paid")
    for finding in findings:
        where = f"round {finding.round}: " if finding.round >= 0 and not finding.what.startswith(
            ("dropped", "slashed")) else ""
        lines.append(f"{where}{finding.what}")
        lines.extend(f"  {line}" for line in finding.details)
    return lines
