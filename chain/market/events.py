"""The market's events, which workers, verifiers and wallets follow through `tx_search` and the websocket.

Every task event has type `task` and attributes `id` (the task id) and `action`; so `task.id='7'` finds all
of task 7's events, and `task.action='segments_sampled'` every sampling. Worker events have type `worker`.
Actions: submitted, joined, started, round_started, committed, round_closed, dropped, segments_sampled,
verdict, segment_decided, slash, payout, round_settled, completed, cancelled, expired, abandoned, refund.
"""

from __future__ import annotations

from ..block import BlockContext, Event
from ..crypto import encode_address


def task_event(ctx: BlockContext, task_id: int, action: str, **attributes: object) -> None:
    ctx.emit(Event.of("task", id=task_id, action=action, **attributes))


def worker_event(ctx: BlockContext, worker: bytes, action: str, **attributes: object) -> None:
    ctx.emit(Event.of("worker", address=encode_address(worker), action=action, **attributes))
