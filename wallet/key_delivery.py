"""The requester's side of a private task: its data key, sealed to each recipient the chain allows, sent on chain.

The chain takes a box only where collecting the key costs something or is needed (docs/privacy.md): an active
member of the running task (never before the start: leaving an open task returns everything), and a validator
drawn onto a committee of one of its sampled segments. `deliver_data_keys` looks once: it asks the chain who may
be delivered a box now and lacks one (`/market/key_recipients`), reads each one's public key from its account
on chain (`public_keys.py`: recorded at its first signature, or in genesis), seals the key to it with the proof
that it knows the box's ephemeral secret (`box_proofs.seal_with_sender_proof`) and sends one `MsgDeliverKey` per
recipient in a single transaction. `requester.follow_task` (which `task submit --data`, the console and the
localnet demo run) calls it on every look at a live task, every few seconds, so members are keyed within blocks
of the start or of joining as a replacement, and validators within blocks of their draw: the chain
counts a key that comes more than `key_delivery_blocks` late as never given, and the requester pays for that
(`trolly.chain.market.key_faults`).
"""

from __future__ import annotations

import dataclasses
import logging

from trolly.chain.crypto import PrivateKey, decode_address, encode_address
from trolly.chain.market.data_keys import box_context, data_key_hash
from trolly.chain.proto import market_pb2

from .box_proofs import seal_with_sender_proof
from .errors import WalletError
from .market_queries import get_key_recipients
from .public_keys import find_public_key
from .rpc import AsyncRpcClient
from .sender import TxSender

log = logging.getLogger("trolly.requester")


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What one look delivered, and to whom it could not (the chain holds no public key for the account: it
    signed no transaction and genesis named none)."""

    delivered: tuple[str, ...]
    without_public_key: tuple[str, ...]


async def deliver_data_keys(client: AsyncRpcClient, sender: TxSender, requester: PrivateKey, task_id: int,
                            data_key: bytes) -> Delivery:
    """Seal `data_key` to every recipient of task `task_id` the chain allows now that has no box yet, and send
    the boxes. Refuses (WalletError) a key that is not the one the task committed to."""
    recipients = await get_key_recipients(client, task_id)
    if recipients.data_key_hash and recipients.data_key_hash != data_key_hash(data_key).hex():
        raise WalletError(f"this data key is not the one task {task_id} committed to: nothing delivered")
    messages, delivered, unknown = [], [], []
    for recipient in recipients.undelivered():
        public_key = await find_public_key(client, recipient.address)
        if public_key is None:
            unknown.append(recipient.address)
            continue
        sealed, proof = seal_with_sender_proof(data_key, public_key, box_context(task_id))
        messages.append(market_pb2.MsgDeliverKey(task_id=task_id, recipient=decode_address(recipient.address),
                                                 sealed_key=sealed, sender_proof=proof))
        delivered.append(recipient.address)
    if messages:
        plan = await sender.plan(encode_address(requester.address), messages)
        await sender.send(requester, plan)
        log.info("task %d: data key delivered to %s", task_id, ", ".join(delivered))
    return Delivery(tuple(delivered), tuple(unknown))
