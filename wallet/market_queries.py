"""Reading the task market's paginated listings: every page of `/market/tasks[/open]`, in id order.

The chain answers at most a page of tasks per query (so a flood of tasks cannot make one query slow); clients
that want the whole listing follow `next` from page to page here.
"""

from __future__ import annotations

from typing import Any

from .rpc import AsyncRpcClient

MAX_PAGES = 10_000
"""Pages followed before giving up: a node that keeps answering `next` cannot keep a client looping."""


async def list_tasks(client: AsyncRpcClient, open_only: bool = True) -> list[dict[str, Any]]:
    """Every task summary of the listing (only open and running tasks with `open_only`), ascending by id."""
    base = "/market/tasks/open" if open_only else "/market/tasks"
    tasks: list[dict[str, Any]] = []
    after = 0
    for _ in range(MAX_PAGES):
        page = await client.query_json(f"{base}/after/{after}" if after else base) or {}
        tasks.extend(page.get("tasks", []))
        following = page.get("next")
        if following is None or not isinstance(following, int) or following <= after:
            return tasks
        after = following
    return tasks
