"""The requester's side of a task, written once for every front end: submit it, then follow it to its end.

`submit_task` plans the task against the chain's market params (`tasks.plan_task`), builds its `MsgSubmitTask`
with the settings below, has the caller's `Send` sign and send it, and reads the new task's id from the
transaction's own `task` event (action `submitted`), so no listing is searched for it. `follow_task` looks at the
task every LOOK_SECONDS until it ends: for private data it delivers the task's data key to each recipient the
chain allows now (`key_delivery`), it keeps the caller's data server up and stops it at the end, and it reports
what it sees as typed events (`FollowEvent`) that the CLI renders, the console records and the demo prints.

The front ends (`trolly-wallet task submit`, the console's New task page, `trolly-localnet demo`) only gather
input and show output; the settings a task is submitted with live here, beside the capability, so none of them
keeps a copy that can drift. The data is served by the front end before the spec is written (its URL is in the
spec), so a front end starts its server and hands it to `follow_task`, which owns it from then on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from typing import AsyncIterator, Awaitable, Callable, Protocol, Union

from google.protobuf.message import Message

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.market.records import LIVE_STATUSES
from trolly.chain.proto import market_pb2

from .errors import WalletError
from .key_delivery import deliver_data_keys
from .market_queries import get_market_params, get_task
from .market_views import TaskView
from .nonces import NonceCache
from .rpc import AsyncRpcClient
from .sender import SendOutcome, TxSender
from .tasks import TaskPlan, plan_task

SAMPLES_PER_WORKER = 2
"""Segments the validators replay per worker per round."""
JOIN_BLOCKS = 100
"""Blocks a task waits for its workers before it expires (and refunds everything)."""
DEFAULT_ROUND_BLOCKS = 30
"""Blocks a round's commit phase stays open, for a model not in ROUND_BLOCKS_BY_ARCH."""
ROUND_BLOCKS_BY_ARCH = {"lora-text": 240}
"""The same for models whose rounds outlast the default: a LoRA round, the base model loaded and the held-out
split evaluated before its first step, each step costing what hundreds of the MLP's do, outlasts the default
window on a localnet's 500 ms blocks, and the task ends abandoned with no commitment (docs/performance.md)."""
LOOK_SECONDS = 2.0
"""How often `follow_task` looks at a task: members are keyed within blocks of the start (or of joining as a
replacement) and validators within blocks of their draw, well inside the chain's `key_delivery_blocks`."""


def round_blocks_for(spec: bytes) -> int:
    """The commit window a task of this spec gets unless its requester names one: by its model's architecture."""
    try:
        arch = json.loads(spec)["model"]["arch"]
    except (ValueError, KeyError, TypeError):
        return DEFAULT_ROUND_BLOCKS  # an invalid spec: `plan_task` refuses it with the reason
    return ROUND_BLOCKS_BY_ARCH.get(arch, DEFAULT_ROUND_BLOCKS)


@dataclasses.dataclass(frozen=True)
class TaskOrder:
    """What a requester asks for: the spec and the terms it offers; None takes what the chain's params allow (the
    largest reward the budget pays, the minimum collateral) or, for `round_blocks`, `round_blocks_for(spec)`."""

    spec: bytes
    budget: int
    workers: int = 1
    reward_per_round: int | None = None
    collateral: int | None = None
    samples_per_worker: int = SAMPLES_PER_WORKER
    join_blocks: int = JOIN_BLOCKS
    round_blocks: int | None = None
    data_key_hash: bytes = b""
    """A private task's commitment to the key drawn for it alone (`chain.market.data_keys.data_key_hash`)."""

    @property
    def spec_hash(self) -> bytes:
        return hashlib.sha256(self.spec).digest()

    @property
    def round_window(self) -> int:
        return self.round_blocks or round_blocks_for(self.spec)


async def plan_order(client: AsyncRpcClient, order: TaskOrder) -> TaskPlan:
    """What the order costs and locks under the chain's market params; WalletError where the chain would refuse."""
    return plan_task(order.spec, await get_market_params(client), order.budget, order.reward_per_round,
                     order.workers, order.samples_per_worker, order.collateral)


def submit_message(order: TaskOrder, plan: TaskPlan) -> market_pb2.MsgSubmitTask:
    """The `MsgSubmitTask` of `order` as `plan` prices it."""
    return market_pb2.MsgSubmitTask(
        spec=order.spec, spec_hash=order.spec_hash, budget=plan.budget, workers=order.workers, rounds=plan.rounds,
        reward_per_round=plan.reward_per_round, collateral=plan.collateral, join_blocks=order.join_blocks,
        round_blocks=order.round_window, samples_per_worker=order.samples_per_worker,
        data_key_hash=order.data_key_hash)


Send = Callable[[list[Message]], Awaitable[tuple[SendOutcome, PrivateKey]]]
"""Signs and sends messages, waiting for their block: the outcome and the key that signed (which delivers a
private task's data key later). The front end chooses how a key is unlocked and what is asked first."""


def sending_with(client: AsyncRpcClient, key: PrivateKey, nonce_cache: NonceCache | None = None,
                 timeout: float = 30.0) -> Send:
    """A `Send` for a key already in hand (a service's, the demo's)."""
    sender = TxSender(client, nonce_cache)

    async def send(messages: list[Message]) -> tuple[SendOutcome, PrivateKey]:
        planned = await sender.plan(encode_address(key.address), messages)
        return await sender.send(key, planned, timeout=timeout), key

    return send


@dataclasses.dataclass(frozen=True)
class SubmittedTask:
    task_id: int
    plan: TaskPlan
    outcome: SendOutcome
    requester: PrivateKey


async def submit_task(client: AsyncRpcClient, order: TaskOrder, send: Send,
                      plan: TaskPlan | None = None) -> SubmittedTask:
    """Plan `order` (unless `plan` is the one the requester was shown), sign and send it with `send`, and read
    the new task's id from the transaction's `submitted` event."""
    plan = plan or await plan_order(client, order)
    if plan.private_data and not order.data_key_hash:
        raise WalletError("the spec's dataset is private: the task must commit to a data key drawn for it alone "
                          "(the chain takes each private task's key once), so submit the pack's own data, which "
                          "is re-encrypted under a new key for this task")
    outcome, key = await send([submit_message(order, plan)])
    return SubmittedTask(submitted_task_id(outcome), plan, outcome, key)


def submitted_task_id(outcome: SendOutcome) -> int:
    """The id in the `task` event with action `submitted` of an included transaction."""
    events = outcome.included.events if outcome.included is not None else ()
    for event in events:
        if event.type == "task" and event.get("action") == "submitted" and (event.get("id") or "").isdigit():
            return int(event.get("id"))
    raise WalletError(f"transaction {outcome.hash} made no task: its result has no `submitted` event")


@dataclasses.dataclass(frozen=True)
class Looked:
    """One look at the task; the last one (`ended`) shows it settled."""

    view: TaskView

    @property
    def ended(self) -> bool:
        return self.view.status not in LIVE_STATUSES


@dataclasses.dataclass(frozen=True)
class KeysDelivered:
    """The data key sealed and sent to these recipients (members of the running task, drawn validators)."""

    recipients: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class KeylessRecipient:
    """A recipient the chain holds no public key for (it signed no transaction and genesis names none), so it
    cannot be given the data key (docs/privacy.md); said once per recipient."""

    address: str


@dataclasses.dataclass(frozen=True)
class Trouble:
    """A look or a delivery that failed (the node down or catching up, a member dropped meanwhile): tried again
    at the next look."""

    message: str


FollowEvent = Union[Looked, KeysDelivered, KeylessRecipient, Trouble]


class Serving(Protocol):
    """A data server a front end started for the task (`compute.requester.serving.ServingThread`)."""

    url: str

    def stop(self) -> None: ...


async def follow_task(client: AsyncRpcClient, task_id: int, *, requester: PrivateKey | None = None,
                      data_key: bytes | None = None, nonce_cache: NonceCache | None = None,
                      serving: Serving | None = None,
                      look_seconds: float = LOOK_SECONDS) -> AsyncIterator[FollowEvent]:
    """Until task `task_id` is neither open nor running, every `look_seconds`: look at the task and, while it
    lives, deliver private data's key (when `requester` and `data_key` are given) to whoever the chain allows now
    and lacks it; each step reported as an event, the last a `Looked` that `ended`. `serving` is kept up until
    then and stopped when the follow ends, whether the task ended or the caller stopped following."""
    sender = TxSender(client, nonce_cache)
    told: set[str] = set()
    try:
        while True:
            try:
                view = await get_task(client, task_id)
            except (WalletError, OSError) as error:
                yield Trouble(f"cannot read task {task_id}: {error}")
            else:
                yield Looked(view)
                if view.status not in LIVE_STATUSES:
                    return
                if requester is not None and data_key is not None:
                    for event in await _deliver(client, sender, requester, task_id, data_key, told):
                        yield event
            await asyncio.sleep(look_seconds)
    finally:
        if serving is not None:
            await asyncio.to_thread(serving.stop)


async def _deliver(client: AsyncRpcClient, sender: TxSender, requester: PrivateKey, task_id: int, data_key: bytes,
                   told: set[str]) -> list[FollowEvent]:
    """One delivery of the data key, as events (recipients without a public key said once, via `told`)."""
    try:
        delivery = await deliver_data_keys(client, sender, requester, task_id, data_key)
    except (WalletError, OSError) as error:
        return [Trouble(f"could not deliver the data key yet: {error}")]
    events: list[FollowEvent] = [KeysDelivered(delivery.delivered)] if delivery.delivered else []
    for address in sorted(set(delivery.without_public_key) - told):
        told.add(address)
        events.append(KeylessRecipient(address))
    return events
