"""The market's end-block work, O(work due at this height): never a scan over all tasks.

Each live task has at most one schedule entry, keyed (height, task id, kind), for the deadline of its current
phase; moving a task to another phase replaces the entry (`store.enter_phase`). A phase that finishes early
(every member committed, every segment decided) is rescheduled to the current height, so its work runs at the
end of the block that finished it. Worker stakes whose unbonding matures at this height are returned here too.

An open task at its join deadline starts if its conditions hold, whatever made them true, and expires only
otherwise (`open_task_due`). Committees drawn for a private task (at sampling, or by an escalation) are
recorded as they are drawn, so its requester may deliver their members the data key (`key_faults`).
"""

from __future__ import annotations

from ..block import BlockContext
from ..state import State
from .events import worker_event
from .key_faults import note_drawn_committees
from .lifecycle import end_task, start_if_ready
from .records import EXPIRED, OPEN, VERIFY
from .reveals import REVEAL, settle_reveals
from .round_lifecycle import close_round, sample_round, settle_round
from .store import JOIN_DEADLINE, ROUND_DEADLINE, SAMPLE, VERIFY_DEADLINE, delete_unbonding, due, escrow_out
from .store import get_task, phase_kind, put_task, remove_due, unbonding_due


def open_task_due(state: State, ctx: BlockContext, task) -> None:
    """An open task at its join deadline: started when its conditions hold by now, else expired."""
    if task.status == OPEN and not start_if_ready(state, ctx, task):
        end_task(state, ctx, task, EXPIRED)


HANDLERS = {
    JOIN_DEADLINE: open_task_due,
    ROUND_DEADLINE: close_round,
    SAMPLE: sample_round,
    VERIFY_DEADLINE: settle_round,
}


def market_end_block(state: State, ctx: BlockContext) -> None:
    height = ctx.env.height
    for worker, amount in unbonding_due(state, height):
        escrow_out(state, worker, amount)
        delete_unbonding(state, height, worker)
        worker_event(ctx, worker, "unbonded", amount=amount)
    # Handlers never schedule at the current height (every delay is >= 1 block), but loop until none is left
    # rather than rely on it.
    while entries := due(state, height):
        for task_id, kind in entries:
            remove_due(state, height, task_id, kind)
            task = get_task(state, task_id)
            if kind == REVEAL:  # a settled round's reveal window, beside the task's phase (even after its end)
                for round_ in [r for h, r in task.reveals_due if h == height]:
                    settle_reveals(state, ctx, task, round_)
                put_task(state, task)
                continue
            if task.phase_deadline != height or phase_kind(task.phase) != kind:
                continue  # cannot happen while enter_phase keeps one entry per task; never act on a stale one
            task.phase_deadline = 0
            HANDLERS[kind](state, ctx, task)
            if task.private_data and task.phase == VERIFY:  # committees drawn or escalated just now
                note_drawn_committees(state, task, height)
            put_task(state, task)
