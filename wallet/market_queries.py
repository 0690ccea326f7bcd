"""Asking the market: each `/market/...` query, its answer read into its view (`market_views.py`).

The chain answers at most a page of tasks per query (so a flood of tasks cannot make one query slow); clients
that want the whole listing follow `next` from page to page here (`list_tasks`). Every function takes the
asynchronous RPC client; the CLI runs them with its synchronous client's `run`.
"""

from __future__ import annotations

from trolly.chain.market.params import MarketParams

from .market_answers import parse_answer
from .market_views import RoundView, TaskPage, TaskSpecView, TaskSummary, TaskView, VerifyWork, WorkerView
from .rpc import AsyncRpcClient

MAX_PAGES = 10_000
"""Pages followed before giving up: a node that keeps answering `next` cannot keep a client looping."""


async def list_tasks(client: AsyncRpcClient, open_only: bool = True) -> list[TaskSummary]:
    """Every task summary of the listing (only open and running tasks with `open_only`), ascending by id."""
    base = "/market/tasks/open" if open_only else "/market/tasks"
    tasks: list[TaskSummary] = []
    after = 0
    for _ in range(MAX_PAGES):
        path = f"{base}/after/{after}" if after else base
        page = TaskPage.from_answer(await client.query_json(path), path)
        tasks.extend(page.tasks)
        if page.next is None or page.next <= after:
            return tasks
        after = page.next
    return tasks


async def get_task(client: AsyncRpcClient, task_id: int) -> TaskView:
    path = f"/market/task/{task_id}"
    return TaskView.from_answer(await client.query_json(path), path)


async def get_round(client: AsyncRpcClient, task_id: int, round_index: int) -> RoundView:
    path = f"/market/task/{task_id}/round/{round_index}"
    return RoundView.from_answer(await client.query_json(path), path)


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


async def get_market_params(client: AsyncRpcClient) -> MarketParams:
    """The market params, read into the chain's own `MarketParams` (its checks included)."""
    return parse_answer(MarketParams, await client.query_json("/market/params"), "/market/params")
