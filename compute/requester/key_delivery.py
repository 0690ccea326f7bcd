"""The requester's side of a private task: its data key, sealed to each member and validator, sent on chain.

A private task starts only once every member and every bonded validator holds the data key sealed to it
(docs/protocol.md 4.1b). `deliver_data_keys` looks once: for each member still in the task and each bonded
validator's operator, with no box on chain yet, it reads the recipient's public key from its account on chain
(`trolly.wallet.public_keys`: recorded at its first signature, or in genesis), seals the key to it and sends one `MsgDeliverKey` per recipient in a
single transaction. `task submit --data` calls it on every look at a live task, so workers are keyed as they
join and validators as they bond (a validator bonded after the start is keyed before its operator's verifier
next looks, and one drawn onto a committee without a key votes nothing: docs/privacy.md).
"""

from __future__ import annotations

import dataclasses
import logging

from trolly.chain.crypto import PrivateKey, decode_address, encode_address
from trolly.chain.market.records import ACTIVE, LIVE_STATUSES
from trolly.chain.proto import market_pb2
from trolly.wallet.market_queries import find_data_key, get_task_overview
from trolly.wallet.public_keys import find_public_key
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import TxSender

from ..data.encryption import seal_data_key

log = logging.getLogger("trolly.requester")


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What one look delivered, and to whom it could not (the chain holds no public key for the account: it
    signed no transaction and genesis named none)."""

    delivered: tuple[str, ...]
    without_public_key: tuple[str, ...]


async def bonded_operators(client: AsyncRpcClient) -> list[str]:
    """The operators of the validators with power, the ones a private task waits for."""
    return [entry["operator"] for entry in await client.query_json("/validators") or [] if int(entry["power"]) > 0]


async def key_recipients(client: AsyncRpcClient, task_id: int) -> list[str]:
    """Who must hold task `task_id`'s data key: its active members, then the bonded validators' operators."""
    task = await get_task_overview(client, task_id)
    if task.status not in LIVE_STATUSES:
        return []
    members = [member.worker for member in task.members if member.status == ACTIVE]
    return members + [operator for operator in await bonded_operators(client) if operator not in members]


async def deliver_data_keys(client: AsyncRpcClient, sender: TxSender, requester: PrivateKey, task_id: int,
                            data_key: bytes) -> Delivery:
    """Seal `data_key` to every recipient of task `task_id` without a box yet, and send the boxes."""
    messages, delivered, unknown = [], [], []
    for recipient in await key_recipients(client, task_id):
        if await find_data_key(client, task_id, recipient) is not None:
            continue
        public_key = await find_public_key(client, recipient)
        if public_key is None:
            unknown.append(recipient)
            continue
        messages.append(market_pb2.MsgDeliverKey(task_id=task_id, recipient=decode_address(recipient),
                                                 sealed_key=seal_data_key(data_key, public_key)))
        delivered.append(recipient)
    if messages:
        plan = await sender.plan(encode_address(requester.address), messages)
        await sender.send(requester, plan)
        log.info("task %d: data key delivered to %s", task_id, ", ".join(delivered))
    return Delivery(tuple(delivered), tuple(unknown))
