"""The node, watched: its status polled once a period, the last height seen kept while it is down, and every
change handed to the pages' server-sent event streams.

A service with a lifecycle (`start`, `stop`): the server starts it with the app and stops it on cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time

from trolly.wallet.errors import WalletError
from trolly.wallet.rpc import AsyncRpcClient

POLL_SECONDS = 1.0
"""How often the node's status is asked: about a block time, so a page follows the chain block by block."""
QUEUE_LENGTH = 16
"""Updates a slow page may fall behind by before it is sent only the latest."""


@dataclasses.dataclass(frozen=True)
class NodeState:
    """What the console last knew of the node; `last_height` survives the node going down."""

    node: str
    up: bool
    height: int
    last_height: int
    block_time: str
    chain_id: str
    error: str
    checked_at: float

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class NodeWatch:
    """Polls `client.status()` every `period` seconds; `subscribe` gives a queue of each new `NodeState`."""

    def __init__(self, client: AsyncRpcClient, period: float = POLL_SECONDS) -> None:
        self.client = client
        self.period = period
        self.state = NodeState(client.url, False, 0, 0, "", "", "not asked yet", 0.0)
        self._subscribers: set[asyncio.Queue] = set()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.check()
        self._task = asyncio.create_task(self._run(), name="node-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self.check()

    async def check(self) -> NodeState:
        """Ask the node once; publish the new state when it differs from the last."""
        try:
            status = await self.client.status()
        except WalletError as error:  # NodeUnreachable, RpcError: the node is down or not a node
            state = dataclasses.replace(self.state, up=False, height=0, error=str(error), checked_at=time.time())
        else:
            state = NodeState(self.client.url, True, status.latest_block_height, status.latest_block_height,
                              status.latest_block_time, status.chain_id, "", time.time())
        changed = (state.up, state.height, state.error) != (self.state.up, self.state.height, self.state.error)
        self.state = state
        if changed:
            for queue in self._subscribers:
                if queue.full():
                    queue.get_nowait()
                queue.put_nowait(state)
        return state

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(QUEUE_LENGTH)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._subscribers.discard(queue)
