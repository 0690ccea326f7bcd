"""What every JSON-RPC method shares: the error type, the method table entry, reaching the app, and
CometBFT's rules for heights and pages."""

from __future__ import annotations

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
