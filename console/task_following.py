"""The requester's side of a task submitted from the console, for as long as the task lives: its data served
from the console (as `task submit --data` serves it), and for private data its key (drawn for this task alone)
sealed to each member once the task runs and to each validator drawn to check it
(`compute.requester.key_delivery`, the command's own delivery).

Each look also hands the whole task to `on_look` (the server charts it: `round_charts`), so a task's rounds are
evaluated while their updates are still served, whether or not a page is open on it. A service with a
lifecycle: the server starts it with the app and `stop` ends every follow and its data server.
A private task's requester key stays in this process's memory while the task lives (as it does in the
`task submit --data` process, which delivers the keys too); the password that unlocked it is not kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Callable

from trolly.chain.crypto import PrivateKey
from trolly.chain.market.records import LIVE_STATUSES
from trolly.compute.requester.serving import ServingThread
from trolly.wallet.errors import WalletError
from trolly.wallet.market_queries import get_task
from trolly.wallet.market_views import TaskView
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import TxSender

from .config import ConsoleConfig
from .templates import TaskData

log = logging.getLogger("trolly.console")
LOOK_SECONDS = 2.0
"""How often a followed task is looked at (the CLI's `task submit --data` looks as often)."""


@dataclasses.dataclass
class Followed:
    task_id: int
    data: TaskData
    server: ServingThread
    requester: PrivateKey | None
    delivered: list[str] = dataclasses.field(default_factory=list)
    problem: str = ""

    def to_json(self) -> dict:
        return {"task_id": self.task_id, "data_url": self.server.url, "data": self.data.description,
                "private": self.data.key is not None, "keys_delivered_to": list(self.delivered),
                "problem": self.problem}


class TaskFollowing:
    """Each followed task's serving and key delivery, until the task ends or the console stops."""

    def __init__(self, client: AsyncRpcClient, config: ConsoleConfig,
                 on_look: Callable[[int, TaskView], object] | None = None) -> None:
        self.client = client
        self.config = config
        self.on_look = on_look
        self.followed: dict[int, Followed] = {}
        self._tasks: dict[int, asyncio.Task] = {}

    def follow(self, followed: Followed) -> None:
        self.followed[followed.task_id] = followed
        self._tasks[followed.task_id] = asyncio.create_task(self._run(followed), name=f"follow-{followed.task_id}")

    async def _run(self, followed: Followed) -> None:
        from trolly.compute.requester.key_delivery import deliver_data_keys  # loads torch (`compute.data`)

        sender = TxSender(self.client, self.config.nonce_cache())
        try:
            while True:
                try:
                    if followed.data.key is not None and followed.requester is not None:
                        delivery = await deliver_data_keys(self.client, sender, followed.requester, followed.task_id,
                                                           followed.data.key)
                        followed.delivered.extend(delivery.delivered)
                    view = await get_task(self.client, followed.task_id)
                    if self.on_look is not None:
                        self.on_look(followed.task_id, view)
                    if view.status not in LIVE_STATUSES:
                        return
                    followed.problem = ""
                except WalletError as error:  # the node down or catching up: said, and tried at the next look
                    followed.problem = str(error)
                await asyncio.sleep(LOOK_SECONDS)
        finally:
            await asyncio.to_thread(followed.server.stop)
            log.info("task %d: no longer serving its data", followed.task_id)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
