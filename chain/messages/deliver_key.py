"""market `MsgDeliverKey`: the requester of a private task hands one recipient its data key, sealed to it.

The recipient is a member of the task (a worker who joined) or a validator's operator (whose verifier checks
the task's segments); the box is `SEALED_KEY_BYTES` long and only the recipient's key opens it, which the chain
cannot check: a box that does not open is the requester's loss, since the task then never starts (or, for a
validator drawn later, that verifier votes nothing). Delivering again replaces the box. The delivery that
completes a full private task's set of keys starts it (`market.data_keys.ready_to_start`).
"""

from __future__ import annotations

from ..block import BlockContext
from ..crypto import ADDRESS_LENGTH, encode_address
from ..errors import InvalidRequest
from ..market.data_keys import SEALED_KEY_BYTES, put_sealed_key, ready_to_start
from ..market.errors import NotKeyRecipient, NotRequester, TaskEnded
from ..market.events import task_event
from ..market.lifecycle import start_task
from ..market.records import LIVE_STATUSES, OPEN
from ..market.store import find_member, get_task, put_task
from ..proto.market_pb2 import MsgDeliverKey
from ..state import State
from ..validators import get_validator


def validate_deliver_key(msg: MsgDeliverKey) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")
    if len(msg.recipient) != ADDRESS_LENGTH:
        raise InvalidRequest(f"recipient must be a {ADDRESS_LENGTH}-byte address")
    if len(msg.sealed_key) != SEALED_KEY_BYTES:
        raise InvalidRequest(f"sealed_key must be {SEALED_KEY_BYTES} bytes (a sealed 32-byte key)")


def process_deliver_key(state: State, ctx: BlockContext, signer: bytes, msg: MsgDeliverKey) -> None:
    task = get_task(state, msg.task_id)
    if task.requester != signer:
        raise NotRequester(f"only the requester of task {task.id} may deliver its data key")
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    if not task.private_data:
        raise InvalidRequest(f"task {task.id}'s dataset is not private: it has no data key")
    if find_member(state, task.id, msg.recipient) is None and get_validator(state, msg.recipient) is None:
        raise NotKeyRecipient(f"{encode_address(msg.recipient)} is neither a member of task {task.id} nor a validator")
    put_sealed_key(state, task.id, msg.recipient, msg.sealed_key)
    task_event(ctx, task.id, "key_delivered", recipient=encode_address(msg.recipient))
    if task.status == OPEN and ready_to_start(state, task):
        start_task(state, ctx, task)
        put_task(state, task)
