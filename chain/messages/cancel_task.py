"""market `MsgCancelTask`: the requester ends its task. Before it starts everything is refunded (and joined
workers get their collateral back); later, rounds already verified stay paid, the round in progress is not,
and the rest of the budget is refunded."""

from __future__ import annotations

from ..block import BlockContext
from ..errors import InvalidRequest
from ..market.errors import NotRequester, TaskEnded
from ..market.lifecycle import end_task
from ..market.records import CANCELLED, LIVE_STATUSES
from ..market.store import get_task, put_task
from ..proto.market_pb2 import MsgCancelTask
from ..state import State


def validate_cancel_task(msg: MsgCancelTask) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")


def process_cancel_task(state: State, ctx: BlockContext, signer: bytes, msg: MsgCancelTask) -> None:
    task = get_task(state, msg.task_id)
    if task.requester != signer:
        raise NotRequester(f"only the requester of task {task.id} may cancel it")
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    end_task(state, ctx, task, CANCELLED)
    put_task(state, task)
