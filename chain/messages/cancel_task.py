"""market `MsgCancelTask`: the requester ends its task, between rounds.

Before the start everything is refunded (and joined workers get their collateral back). Later a cancel takes
effect between rounds: when commitments of the round in progress are already on chain (its commit phase has
one, or it is being sampled or verified), the workers did that round's work in good faith, so the round is
closed, verified and paid as usual and the task ends `cancelled` when it settles; otherwise (a commit phase
with no commitment yet, or the final report) the task ends at once. Rounds already settled stay paid; the rest
of the budget is refunded and collateral returned.
"""

from __future__ import annotations

from ..block import BlockContext
from ..errors import InvalidRequest
from ..market.errors import CancelPending, NotRequester, TaskEnded
from ..market.events import task_event
from ..market.lifecycle import end_task
from ..market.records import CANCELLED, COMMIT, LIVE_STATUSES, RUNNING, SAMPLING, VERIFY, Task
from ..market.store import find_commitment, get_task, put_task
from ..proto.market_pb2 import MsgCancelTask
from ..state import State


def validate_cancel_task(msg: MsgCancelTask) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")


def round_has_commitments(state: State, task: Task) -> bool:
    """Whether the round in progress has work on chain that must still be verified and paid."""
    if task.status != RUNNING or task.round >= task.rounds:
        return False
    if task.phase in (SAMPLING, VERIFY):
        return True
    return task.phase == COMMIT and any(find_commitment(state, task.id, task.round, worker) is not None
                                        for worker in task.members)


def process_cancel_task(state: State, ctx: BlockContext, signer: bytes, msg: MsgCancelTask) -> None:
    task = get_task(state, msg.task_id)
    if task.requester != signer:
        raise NotRequester(f"only the requester of task {task.id} may cancel it")
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    if task.cancel_requested:
        raise CancelPending(f"task {task.id} is already cancelled; it ends when round {task.round} settles")
    if round_has_commitments(state, task):
        task.cancel_requested = 1
        task_event(ctx, task.id, "cancel_requested", round=task.round)
    else:
        end_task(state, ctx, task, CANCELLED)
    put_task(state, task)
