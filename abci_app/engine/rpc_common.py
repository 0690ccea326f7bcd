"""What every JSON-RPC method shares: the error type, the method table entry, reaching the app, CometBFT's
rules for heights and pages, and running a search off the event loop within a time budget."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from . import AppConnectionLost

DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


class RpcError(Exception):
    """A failed call: JSON-RPC error `code`/`message`, the reason as the exception text (`data`)."""

    code = -32603
    message = "Internal error"


@dataclass(frozen=True)
class Method:
    handler: Callable[..., Awaitable[object]]
    params: tuple[tuple[str, str], ...] = ()
    takes_client: bool = False
    """The handler also gets `client`, the caller's `host:port` (subscriptions are counted per client)."""


def app_client(node):
    """The app's connections, once the handshake is over (before it, the app may be mid-replay)."""
    client = node.producer.client
    if client is None or not node.producer.connected.is_set():
        raise RpcError("the ABCI application is not connected (the engine is waiting for it)")
    return client


async def app_call(coroutine):
    try:
        return await coroutine
    except AppConnectionLost as exc:
        raise RpcError(f"the ABCI application connection was lost: {exc}") from None


def latest_height(node) -> int:
    return node.producer.visible_height


def resolve_height(node, height: int | None) -> int:
    """CometBFT's `getHeight`: the latest when absent or 0; otherwise it must exist."""
    latest = latest_height(node)
    if height is None or height == 0:
        if latest == 0:
            raise RpcError("no blocks yet: the chain has not produced its first block")
        return latest
    if height < 0:
        raise RpcError(f"height must be greater than 0, but got {height}")
    if height > latest:
        raise RpcError(f"height {height} must be less than or equal to the current blockchain height {latest}")
    base = node.blockstore.earliest_height
    if height < base:
        raise RpcError(f"height {height} is not available, lowest height is {base}")
    return height


def page_window(page: int | None, per_page: int | None, total: int) -> tuple[int, int]:
    per_page = DEFAULT_PER_PAGE if not per_page or per_page <= 0 else min(per_page, MAX_PER_PAGE)
    pages = max(1, -(-total // per_page))
    page = 1 if page is None else page
    if page <= 0 or page > pages:
        raise RpcError(f"page should be within [1, {pages}] range, given {page}")
    return (page - 1) * per_page, per_page


class SearchDeadline:
    """The time budget of one search, checked by the scan as it goes (on a search thread). It also ends when
    the node is closing, so that no scan outlives the block store it reads."""

    def __init__(self, seconds: float, closing) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._closing = closing

    def check(self) -> None:
        if self._closing.is_set():
            raise RpcError("the node is shutting down")
        if time.monotonic() > self._end:
            raise RpcError(
                f"search timed out: it scanned for more than {self.seconds:g}s; narrow the query "
                "(tx.height, tx.hash or an indexed event attribute) or ask for fewer results"
            )


async def run_search(node, scan, *arguments):
    """Run `scan(deadline, node, *arguments)` on the node's search threads, not on the event loop: a long scan
    then never delays block production or other calls, and it stops with an error once its time is up (the
    clock starts now, so a search that waited for a free thread has less of it left)."""
    deadline = SearchDeadline(node.config.search_timeout, node.closing)
    return await asyncio.get_running_loop().run_in_executor(node.search_threads, scan, deadline, node, *arguments)
