"""Asking the market: each `/market/...` query, its answer read into its view (`market_views.py`).

The chain answers at most a page per query (so a flood of tasks, or a task of many rounds and workers, cannot make
one query slow); clients that want the whole follow `next` from page to page here: the task listing
(`list_tasks`), a round's commitments (`get_round`) and a whole task, its overview and then each round
(`get_task`). Every function takes the asynchronous RPC client; the CLI runs them with its synchronous client's
`run`.

Each page is read at the node's latest height (the app answers no other), so a task assembled while a block
commits may hold pages of two heights: every commitment is whole, but one member's may be as it was at the first
height and another's as at the second, and a commitment made meanwhile by a member an earlier page covered is
missed until the next reading.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable

from trolly.chain.errors import NotFound
from trolly.chain.market.params import MarketParams

from .market_answers import parse_answer
from .errors import QueryFailed
from .market_views import (Commitment, DataKeyView, KeyRecipients, ReplayGpus, RoundPage, RoundView, TaskDetail,
                           TaskOverview, TaskPage, TaskSpecView, TaskSummary, TaskView, VerifyWork, WorkerView)
from .rpc import AsyncRpcClient

MAX_PAGES = 10_000
"""Pages followed before giving up: a node that keeps answering `next` cannot keep a client looping."""

PageReader = Callable[[str], Awaitable[Any]]
"""Reads one query's JSON answer by its path: the node's word (`AsyncRpcClient.query_json`), or a proven answer
(`proven_views.prove_task` passes one that checks each page's proofs)."""


async def list_tasks(client: AsyncRpcClient, open_only: bool = True) -> list[TaskSummary]:
    """Every task summary of the listing (only open and running tasks with `open_only`), ascending by id."""
    tasks: list[TaskSummary] = []
    after = 0
    for _ in range(MAX_PAGES):
        page = await task_page(client, after, open_only)
        tasks.extend(page.tasks)
        if page.next is None or page.next <= after:
            return tasks
        after = page.next
    return tasks


async def task_page(client: AsyncRpcClient, after: int = 0, open_only: bool = False) -> TaskPage:
    """One page of the task listing: the tasks after id `after` (from the first with 0), and where the next starts."""
    path = task_page_path(after, open_only)
    return TaskPage.from_answer(await client.query_json(path), path)


def task_page_path(after: int = 0, open_only: bool = False) -> str:
    base = "/market/tasks/open" if open_only else "/market/tasks"
    return f"{base}/after/{after}" if after else base


async def get_task_overview(client: AsyncRpcClient, task_id: int) -> TaskOverview:
    """The task without its rounds: terms, status and members (one query)."""
    path = f"/market/task/{task_id}"
    return TaskOverview.from_answer(await client.query_json(path), path)


async def get_task(client: AsyncRpcClient, task_id: int) -> TaskView:
    """The whole task: its overview, then every round it shows (`get_round`)."""
    overview = await get_task_overview(client, task_id)
    return whole_task(overview, [await get_round(client.query_json, task_id, r) for r in range(overview.recorded_rounds)])


def whole_task(overview: TaskOverview, rounds: list[RoundView]) -> TaskView:
    """The task view of an overview and its rounds, read apart."""
    fields = {f.name: getattr(overview, f.name) for f in dataclasses.fields(TaskDetail)}
    return TaskView(**fields, round_details=tuple(rounds))


async def get_round(read: PageReader, task_id: int, round_index: int) -> RoundView:
    """Round `round_index` of a task with all its commitments, its pages followed to the last, each read with
    `read`: the node's word (`client.query_json`) or a proving reader (`proven_views.prove_task`'s)."""
    base = f"/market/task/{task_id}/round/{round_index}"
    commitments: list[Commitment] = []
    after = None
    for _ in range(MAX_PAGES):
        path = base if after is None else f"{base}/after/{after}"
        page = RoundPage.from_answer(await read(path), path)
        commitments.extend(page.commitments)
        if page.next is None or (after is not None and page.next <= after):
            break
        after = page.next
    return RoundView(round=page.round, start_weights_hash=page.start_weights_hash, final_report=page.final_report,
                     commitments=tuple(commitments))


async def get_spec(client: AsyncRpcClient, task_id: int) -> TaskSpecView:
    path = f"/market/spec/{task_id}"
    return TaskSpecView.from_answer(await client.query_json(path), path)


async def get_worker(client: AsyncRpcClient, address: str) -> WorkerView:
    """The worker at `address`; QueryFailed (code NotFound) when it is neither registered nor unbonding."""
    path = f"/market/worker/{address}"
    return WorkerView.from_answer(await client.query_json(path), path)


async def get_verify_work(client: AsyncRpcClient, validator: str) -> VerifyWork:
    path = f"/market/verify/{validator}"
    return VerifyWork.from_answer(await client.query_json(path), path)


async def get_replay_gpus(client: AsyncRpcClient) -> ReplayGpus:
    """The GPUs each validator's verifier replays (the committees of GPU-trained commitments come from these)."""
    return ReplayGpus.from_answer(await client.query_json("/market/replay_gpus"), "/market/replay_gpus")


async def get_market_params(client: AsyncRpcClient) -> MarketParams:
    """The market params, read into the chain's own `MarketParams` (its checks included)."""
    return parse_answer(MarketParams, await client.query_json("/market/params"), "/market/params")


async def get_key_recipients(client: AsyncRpcClient, task_id: int) -> KeyRecipients:
    """Who may be delivered task `task_id`'s data key now, and what each holds."""
    path = f"/market/key_recipients/{task_id}"
    return KeyRecipients.from_answer(await client.query_json(path), path)


async def find_data_key(client: AsyncRpcClient, task_id: int, recipient: str) -> DataKeyView | None:
    """Task `task_id`'s data key sealed to `recipient`, None while the requester has not delivered it."""
    path = f"/market/data_key/{task_id}/{recipient}"
    try:
        return DataKeyView.from_answer(await client.query_json(path), path)
    except QueryFailed as error:
        if error.code == NotFound.code:
            return None
        raise
