"""market `MsgLeaveTask`: a member leaves a task, so its slot opens for a replacement (docs/protocol.md 4.1c).

Only an active member of an open or running task may leave (`NotMember`, `TaskEnded` otherwise), and only once
(`LeavePending` while a leave waits for its round to settle). An open task: at once, its collateral returned
in full and its place reopened. A running task: at once when it has no commitment in the current round (a
drop with reason "left", the missed-round penalty burned), else when that round settles, so a slash still
applies (`lifecycle.leave_task`). Either way its slot opens when the next round starts; a round in its commit
phase stops waiting for a member who left.
"""

from __future__ import annotations

from ..block import BlockContext
from ..errors import InvalidRequest
from ..market.errors import LeavePending, NotMember, TaskEnded
from ..market.lifecycle import leave_open_task, leave_task
from ..market.records import ACTIVE, LIVE_STATUSES, OPEN
from ..market.round_lifecycle import close_when_all_committed
from ..market.store import find_member, get_task, put_task
from ..proto.market_pb2 import MsgLeaveTask
from ..state import State


def validate_leave_task(msg: MsgLeaveTask) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")


def process_leave_task(state: State, ctx: BlockContext, signer: bytes, msg: MsgLeaveTask) -> None:
    task = get_task(state, msg.task_id)
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    member = find_member(state, task.id, signer)
    if member is None or member.status != ACTIVE:
        raise NotMember(f"not an active member of task {task.id}")
    if member.leaving:
        raise LeavePending(f"already leaving task {task.id}: it leaves when round {task.round} settles")
    if task.status == OPEN:
        leave_open_task(state, ctx, task, member)
    else:
        leave_task(state, ctx, task, member)
        close_when_all_committed(state, ctx, task)
    put_task(state, task)
