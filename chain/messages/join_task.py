"""market `MsgJoinTask`: a registered worker joins a task, locking its collateral.

An open task: the member's worker index is its position in join order; the task starts in the block in which
the last wanted worker joins (`lifecycle.start_if_ready`; a private task's data key is delivered after the
start, `MsgDeliverKey`). A running task: the worker replaces a member who left, into an open slot, and trains
from the next round (`lifecycle.join_open_slot`, docs/protocol.md 4.1c)."""

from __future__ import annotations

from ..block import BlockContext
from ..crypto import encode_address
from ..errors import InvalidRequest
from ..market.errors import AlreadyMember, TaskNotOpen, WorkerBusy
from ..market.events import task_event
from ..market.lifecycle import join_open_slot, start_if_ready
from ..market.params import MarketParams
from ..market.records import ACTIVE, OPEN, RUNNING, Member
from ..market.store import escrow_in, find_member, get_task, get_worker, put_member, put_task, put_worker
from ..params import get_params
from ..proto.market_pb2 import MsgJoinTask
from ..state import State


def validate_join_task(msg: MsgJoinTask) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")


def process_join_task(state: State, ctx: BlockContext, signer: bytes, msg: MsgJoinTask) -> None:
    task = get_task(state, msg.task_id)
    worker = get_worker(state, signer)
    if find_member(state, task.id, signer) is not None:
        raise AlreadyMember(f"already a member of task {task.id} (a member who left cannot join again)")
    if task.status == OPEN and len(task.members) >= task.workers_wanted:
        raise TaskNotOpen(f"task {task.id} is not accepting workers (all {task.workers_wanted} joined)")
    if task.status not in (OPEN, RUNNING):
        raise TaskNotOpen(f"task {task.id} is not accepting workers ({task.status})")
    limit = get_params(state, MarketParams).max_tasks_per_worker
    if len(worker.tasks) >= limit:
        raise WorkerBusy(f"the worker is already in {len(worker.tasks)} tasks, limit {limit}")

    if task.status == RUNNING:
        member = join_open_slot(state, ctx, task, signer)
    else:
        escrow_in(state, signer, task.collateral)
        member = Member(task_id=task.id, worker=signer, index=len(task.members), status=ACTIVE,
                        collateral=task.collateral, joined_height=ctx.env.height)
        task_event(ctx, task.id, "joined", worker=encode_address(signer), index=member.index,
                   collateral=task.collateral)
    put_member(state, member)
    worker.tasks = sorted(worker.tasks + [task.id])
    put_worker(state, worker)
    task.members.append(signer)
    task.active_members += 1
    start_if_ready(state, ctx, task)
    put_task(state, task)
