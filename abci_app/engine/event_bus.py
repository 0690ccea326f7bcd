"""The event bus: what websocket subscribers and `broadcast_tx_commit` wait on.

The producer publishes one `NewBlock` event per block and one `Tx` event per transaction, each with its
CometBFT-shaped data and its event map (`{"tm.event": ["Tx"], "tx.hash": [...], "transfer.amount": [...]}`)
against which subscription queries are matched. Each subscriber has a bounded queue; one that falls behind
is cancelled rather than allowed to slow block production (CometBFT's behaviour for slow clients).

Subscriptions are counted per client (a remote `host:port`) as CometBFT's pubsub does: at most
`max_clients` distinct clients hold subscriptions (`[rpc] max_subscription_clients`) and each holds at most
`max_per_client` (`[rpc] max_subscriptions_per_client`). A websocket `subscribe` and an in-flight
`broadcast_tx_commit` count alike; going over answers CometBFT's own error text.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from . import EngineError
from .event_query import Query


class SubscriptionLimit(EngineError):
    """A subscription would exceed `max_subscription_clients` or `max_subscriptions_per_client`."""


@dataclass
class Subscription:
    query: Query
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1000))
    cancelled: str | None = None
    identifier: int = 0
    client: str = ""


@dataclass(frozen=True)
class PublishedEvent:
    """One event: its query-visible map and a function producing its RPC `data` (built only if wanted)."""

    events: dict[str, list[str]]
    data: Callable[[], Any]


class EventBus:
    def __init__(self, max_clients: int = 100, max_per_client: int = 5) -> None:
        self.max_clients = max_clients
        self.max_per_client = max_per_client
        self._subscriptions: dict[int, Subscription] = {}
        self._per_client: dict[str, int] = {}
        self._ids = itertools.count(1)

    def check_limits(self, client: str) -> None:
        """SubscriptionLimit if `client` may not take one more subscription (CometBFT's wording)."""
        held = self._per_client.get(client, 0)
        if held == 0 and len(self._per_client) >= self.max_clients:
            raise SubscriptionLimit(f"max_subscription_clients {self.max_clients} reached")
        if held >= self.max_per_client:
            raise SubscriptionLimit(f"max_subscriptions_per_client {self.max_per_client} reached")

    def subscribe(self, query: Query, client: str, queue_size: int = 1000) -> Subscription:
        self.check_limits(client)
        subscription = Subscription(query, asyncio.Queue(maxsize=queue_size), identifier=next(self._ids), client=client)
        self._subscriptions[subscription.identifier] = subscription
        self._per_client[client] = self._per_client.get(client, 0) + 1
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if self._subscriptions.pop(subscription.identifier, None) is None:
            return
        held = self._per_client.get(subscription.client, 0) - 1
        if held > 0:
            self._per_client[subscription.client] = held
        else:
            self._per_client.pop(subscription.client, None)

    @property
    def client_count(self) -> int:
        return len(self._per_client)

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
