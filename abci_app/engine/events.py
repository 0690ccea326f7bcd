"""The event bus: what websocket subscribers and `broadcast_tx_commit` wait on.

The producer publishes one `NewBlock` event per block and one `Tx` event per transaction, each with its
CometBFT-shaped data and its event map (`{"tm.event": ["Tx"], "tx.hash": [...], "transfer.amount": [...]}`)
against which subscription queries are matched. Each subscriber has a bounded queue; one that falls behind
is cancelled rather than allowed to slow block production (CometBFT's behaviour for slow clients).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from .query import Query


@dataclass
class Subscription:
    query: Query
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1000))
    cancelled: str | None = None
    identifier: int = 0


@dataclass(frozen=True)
class PublishedEvent:
    """One event: its query-visible map and a function producing its RPC `data` (built only if wanted)."""

    events: dict[str, list[str]]
    data: Callable[[], Any]


class EventBus:
    def __init__(self) -> None:
        self._subscriptions: dict[int, Subscription] = {}
        self._ids = itertools.count(1)

    def subscribe(self, query: Query, queue_size: int = 1000) -> Subscription:
        subscription = Subscription(query, asyncio.Queue(maxsize=queue_size), identifier=next(self._ids))
        self._subscriptions[subscription.identifier] = subscription
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.pop(subscription.identifier, None)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscriptions)

    def publish(self, event: PublishedEvent) -> None:
        data = None
        for subscription in list(self._subscriptions.values()):
            if not subscription.query.matches(event.events):
                continue
            if data is None:
                data = event.data()
            try:
                subscription.queue.put_nowait((event.events, data))
            except asyncio.QueueFull:
                # Make room for the None that tells the reader its subscription is gone.
                subscription.cancelled = "client is not pulling messages fast enough"
                self.unsubscribe(subscription)
                while not subscription.queue.empty():
                    subscription.queue.get_nowait()
                subscription.queue.put_nowait(None)
