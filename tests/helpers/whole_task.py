"""The whole task as every client reads it (`market_queries.get_task`: the overview, then each round's pages),
written back as JSON, for tests that ask the chain synchronously: the in-process `chain_helpers.Chain.query`
or a node's RPC.

    view = whole_task(chain.query, task_id)            # {..., "members": [...], "round_details": [...]}
    view = whole_task(lambda path: query(rpc, path), 1)
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine

from trolly.wallet.market_queries import get_task


class _SynchronousQueries:
    """`query_json` over a synchronous `query(path) -> answer`, for the wallet's asynchronous fetches."""

    def __init__(self, query: Callable[[str], Any]) -> None:
        self._query = query

    async def query_json(self, path: str, height: int = 0) -> Any:
        return self._query(path)


def _run_now(coroutine: Coroutine) -> Any:
    """The result of a coroutine that never waits (each query answers at once), run without an event loop, so a
    test already inside one may call it too."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a synchronous query waited")


def whole_task(query: Callable[[str], Any], task_id: int) -> dict:
    """Task `task_id` with its members and every round it shows, as `get_task` assembles it."""
    return _run_now(get_task(_SynchronousQueries(query), task_id)).to_answer()
