"""The requester's side of a task submitted from the console, for as long as the task lives: the requester
library's `follow_task` (`wallet/requester.py`, what `task submit --data` runs): its data served from the console,
and for private data its key (drawn for this task alone) sealed to each member once the task runs and to each
validator drawn to check it. This file records what the follow reports, for the task's page.

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
from trolly.compute.requester.serving import ServingThread
from trolly.wallet.market_views import TaskView
from trolly.wallet.requester import FollowEvent, KeylessRecipient, KeysDelivered, Looked, Trouble, follow_task
from trolly.wallet.rpc import AsyncRpcClient

from .config import ConsoleConfig
from .templates import TaskData

log = logging.getLogger("trolly.console")


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

    def record(self, event: FollowEvent) -> None:
        """What the follow reported, kept for the task's page: the keys delivered, the latest problem (cleared by
        a look that worked)."""
        if isinstance(event, KeysDelivered):
            self.delivered.extend(event.recipients)
        elif isinstance(event, KeylessRecipient):
            self.problem = f"no public key on chain for {event.address}: it cannot be given the data key"
        elif isinstance(event, Trouble):
            self.problem = event.message
        elif isinstance(event, Looked):
            self.problem = ""


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
        events = follow_task(self.client, followed.task_id, requester=followed.requester, data_key=followed.data.key,
                             nonce_cache=self.config.nonce_cache(), serving=followed.server)
        async with contextlib.aclosing(events):
            async for event in events:
                followed.record(event)
                if isinstance(event, Looked) and self.on_look is not None:
                    self.on_look(followed.task_id, event.view)
        log.info("task %d: no longer serving its data", followed.task_id)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
