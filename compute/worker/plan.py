"""The worker loop's decision: given the chain's view of a task, what this worker does next.

The chain is the clock. `decide(view, address)` reads the task as the chain shows it (its `TaskView`, from
`/market/task/<id>` and its rounds' pages) and returns one `Action`; the service carries it out and asks again. Because the decision depends
only on the chain, a restarted worker takes the same decision as the one that was killed, and its saved
progress (`progress.py`) tells the action where to resume.

    task ended, or we are not an active member any more     FINISH (with the reason)
    task open, waiting for workers                          WAIT
    joined as a replacement, before its first round         WAIT  (mirror the current round's updates)
    commit phase of round r < R, we have not committed      TRAIN r  (train, encode, publish, commit)
    commit phase of round R (the final report)              REPORT_FINAL R  (publish W_R, commit its hash)
    committed, or sampling / verification of round r        WAIT  (mirror round r's updates meanwhile)
"""

from __future__ import annotations

import dataclasses

# The chain's vocabulary, as the task query's JSON spells it: imported from where the chain declares it.
from trolly.chain.market.records import ACTIVE, LIVE_STATUSES, OPEN, RUNNING
from trolly.chain.market.records import COMMIT as COMMIT_PHASE
from trolly.wallet.market_views import TaskSummary, TaskView

WAIT, TRAIN, REPORT_FINAL, FINISH = "wait", "train", "report_final", "finish"


@dataclasses.dataclass(frozen=True)
class Action:
    kind: str
    round: int = -1
    reason: str = ""
    mirror_round: int = -1
    """While waiting: a round whose committed updates should be fetched and kept (-1: none)."""


def committed_on_chain(view: TaskView, round_index: int, address: str) -> bool:
    detail = view.round_detail(round_index)
    return detail is not None and detail.commitment_of(address) is not None


def takes_workers(summary: TaskSummary) -> bool:
    """Whether a task takes a `JoinTask` now: open with a place left, or running with a slot open to a
    replacement while a training round is left after the current one (docs/protocol.md 4.1c)."""
    if summary.status == OPEN:
        return summary.workers_joined < summary.workers_wanted
    return (summary.status == RUNNING and summary.open_slots > 0 and summary.round + 1 < summary.rounds
            and summary.replacements < summary.workers_wanted)


def decide(view: TaskView, address: str) -> Action:
    member = view.member(address)
    if member is None:
        return Action(FINISH, reason="not a member of the task")
    if view.status not in LIVE_STATUSES:
        return Action(FINISH, reason=f"task {view.status}")
    if member.status != ACTIVE:
        return Action(FINISH, reason=f"{member.status}: {member.reason or 'no reason given'}")
    if view.status == OPEN:
        return Action(WAIT, reason=f"waiting for workers ({view.workers_joined} of {view.workers_wanted})")
    round_index, phase = view.round, view.phase
    if round_index < member.first_round:
        return Action(WAIT, round_index, f"replacement: trains from round {member.first_round}",
                      mirror_round=round_index)
    if phase == COMMIT_PHASE:
        if committed_on_chain(view, round_index, address):
            return Action(WAIT, round_index, f"round {round_index} committed, waiting for the others",
                          mirror_round=round_index)
        if round_index == view.rounds:
            return Action(REPORT_FINAL, round_index, "final report")
        return Action(TRAIN, round_index, f"round {round_index}")
    return Action(WAIT, round_index, f"round {round_index}: {phase}", mirror_round=round_index)
