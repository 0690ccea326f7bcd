"""market `MsgCancelTask`: the requester ends its task, between rounds.

Before the start everything is refunded (and joined workers get their collateral back). Later a cancel takes
effect between rounds: once a training round has started, its workers are training on the requester's word
(whether or not a commitment is on chain yet), so that round is closed, verified and paid as usual and the
task ends `cancelled` when it settles, instead of starting the next round. During the final report (no
training left) the task ends at once. Rounds already settled stay paid; the rest of the budget is refunded
and collateral returned.
"""

from __future__ import annotations

from ..block import BlockContext
from ..errors import InvalidRequest
from ..market.errors import CancelPending, NotRequester, TaskEnded
from ..market.events import task_event
from ..market.lifecycle import end_task
from ..market.records import CANCELLED, LIVE_STATUSES, RUNNING, Task
from ..market.store import get_task, put_task
from ..proto.market_pb2 import MsgCancelTask
from ..state import State


def validate_cancel_task(msg: MsgCancelTask) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")


def round_in_progress(task: Task) -> bool:
    """Whether a training round has started and not settled: workers are training for it, or it awaits
    verification, and it must still be verified and paid."""
    return task.status == RUNNING and task.round < task.rounds


def process_cancel_task(state: State, ctx: BlockContext, signer: bytes, msg: MsgCancelTask) -> None:
    task = get_task(state, msg.task_id)
    if task.requester != signer:
        raise NotRequester(f"only the requester of task {task.id} may cancel it")
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    if task.cancel_requested:
        raise CancelPending(f"task {task.id} is already cancelled; it ends when round {task.round} settles")
    if round_in_progress(task):
        task.cancel_requested = 1
        task_event(ctx, task.id, "cancel_requested", round=task.round)
    else:
        end_task(state, ctx, task, CANCELLED)
    put_task(state, task)
