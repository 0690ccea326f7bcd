"""Who may push to a blob relay, and for which round: what the node answers about a task, briefly kept.

A push is for one round of one task (`relay_auth.py`): the relay takes it only from an active member of the task
while the task is open or running, and only for the task's current round on chain, so a push signed for another
round is refused even inside the signature's time window.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from trolly.chain.market.records import ACTIVE, LIVE_STATUSES
from trolly.wallet.errors import QueryFailed, WalletError
from trolly.wallet.market_queries import get_task_overview
from trolly.wallet.rpc import AsyncRpcClient

from .errors import BlobError, BlobRejected

log = logging.getLogger(__name__)


class NotAMember(BlobRejected):
    """The signer is not an active member of a live task (HTTP 403)."""


class WrongRound(BlobRejected):
    """The push is signed for a round other than the task's current one on chain (HTTP 409)."""


class ChainUnreadable(BlobError):
    """The relay cannot ask the node who the task's members are (HTTP 503: the pusher retries)."""


@dataclasses.dataclass(frozen=True)
class TaskMembers:
    """A task's active members and current round, as the node answered at `read_at` (monotonic seconds)."""

    read_at: float
    members: frozenset[str]
    round_index: int


class ChainMembers:
    """Who may push for a task: its active members while it is open or running, for its current round, as the
    node answers.

    A positive answer is kept `ttl` seconds (a round's pushes ask once); a negative one, or a push for a round
    other than the one kept, is asked again, so a worker that has just joined, or a round that has just begun,
    is not turned away. Answers older than `ttl` are dropped as others come in."""

    def __init__(self, client: AsyncRpcClient, ttl: float = 5.0) -> None:
        self.client = client
        self.ttl = ttl
        self._kept: dict[int, TaskMembers] = {}

    async def check(self, task_id: int, worker: str, round_index: int) -> None:
        kept = self._kept.get(task_id)
        if (kept is not None and time.monotonic() - kept.read_at < self.ttl and worker in kept.members
                and kept.round_index == round_index):
            return
        try:
            task = await get_task_overview(self.client, task_id)
        except QueryFailed as error:  # no such task
            raise NotAMember(f"task {task_id}: {error}") from None
        except WalletError as error:
            raise ChainUnreadable(f"cannot read task {task_id} from the node: {error}") from None
        if task.status not in LIVE_STATUSES:
            raise NotAMember(f"task {task_id} is {task.status}: the relay takes pushes for open and running tasks")
        now = time.monotonic()
        self._kept = {t: k for t, k in self._kept.items() if now - k.read_at < self.ttl}
        self._kept[task_id] = TaskMembers(now, frozenset(m.worker for m in task.members if m.status == ACTIVE),
                                          task.round)
        if worker not in self._kept[task_id].members:
            raise NotAMember(f"{worker} is not an active member of task {task_id}")
        if task.round != round_index:
            raise WrongRound(f"the push is signed for round {round_index}; task {task_id} is in round {task.round} "
                             f"on chain (a push is good for its own round only)")

    async def settled(self, task_id: int) -> bool:
        """Whether the task is over on chain (or unknown there): its blobs may go once the grace has passed."""
        try:
            return (await get_task_overview(self.client, task_id)).status not in LIVE_STATUSES
        except QueryFailed:
            return True
        except WalletError as error:
            log.warning("cannot read task %d (%s); keeping its blobs", task_id, error)
            return False
