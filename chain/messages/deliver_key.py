"""market `MsgDeliverKey`: the requester of a private task hands one recipient its data key, sealed to it.

A key goes only where collecting it costs something or is needed (docs/privacy.md):
- to an active member of a running task, never while the task is open (leaving an open task returns the whole
  collateral; once a member holds its box, leaving before the end forfeits it, `lifecycle.departure_penalty`);
- to a validator's operator drawn onto a committee of one of the task's sampled segments (any committee drawn so
  far, escalations included: `data_keys.drawn_height`), never to every validator.
The box is `SEALED_KEY_BYTES` long and only the recipient's key opens it; the chain cannot check what is inside,
so a recipient that finds it bad says so (`MsgReportBadKey`). The sender proves it knows the box's ephemeral
secret (`sender_proof`, `box_sender_proofs.check_sender_proof` for the recipient's recorded key and the task's
`data_keys.box_context`), so that report reveals nothing it did not know. A box is delivered once: a requester cannot swap
a good box for a bad one, or the other way round, under a recipient's report. Delivering starts nothing: a
private task starts when it is full, like a public one.
"""

from __future__ import annotations

from ..accounts import get_account
from ..block import BlockContext
from ..box_sender_proofs import SENDER_PROOF_BYTES, check_sender_proof
from ..crypto import ADDRESS_LENGTH, encode_address
from ..errors import InvalidRequest
from ..market.data_keys import SEALED_KEY_BYTES, box_context, drawn_height, find_key_box, put_key_box
from ..market.errors import KeyAlreadyDelivered, NotKeyRecipient, NotRequester, TaskEnded, TaskNotStarted
from ..market.events import task_event
from ..market.records import ACTIVE, LIVE_STATUSES, OPEN, KeyBox, Task
from ..market.store import find_member, get_task
from ..proto.market_pb2 import MsgDeliverKey
from ..state import State


def validate_deliver_key(msg: MsgDeliverKey) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")
    if len(msg.recipient) != ADDRESS_LENGTH:
        raise InvalidRequest(f"recipient must be a {ADDRESS_LENGTH}-byte address")
    if len(msg.sealed_key) != SEALED_KEY_BYTES:
        raise InvalidRequest(f"sealed_key must be {SEALED_KEY_BYTES} bytes (a sealed 32-byte key)")
    if len(msg.sender_proof) != SENDER_PROOF_BYTES:
        raise InvalidRequest(f"sender_proof must be {SENDER_PROOF_BYTES} bytes")


def check_key_recipient(state: State, task: Task, recipient: bytes) -> str:
    """'member' or 'validator': why `recipient` may be delivered the running task's key; raises otherwise."""
    member = find_member(state, task.id, recipient)
    if member is not None and member.status == ACTIVE:
        return "member"
    if drawn_height(state, task.id, recipient) is not None:
        return "validator"
    raise NotKeyRecipient(f"{encode_address(recipient)} is neither an active member of task {task.id} nor a "
                          f"validator drawn onto one of its committees")


def process_deliver_key(state: State, ctx: BlockContext, signer: bytes, msg: MsgDeliverKey) -> None:
    task = get_task(state, msg.task_id)
    if task.requester != signer:
        raise NotRequester(f"only the requester of task {task.id} may deliver its data key")
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    if not task.private_data:
        raise InvalidRequest(f"task {task.id}'s dataset is not private: it has no data key")
    if task.status == OPEN:
        raise TaskNotStarted(f"task {task.id} has not started: its data key is delivered once it runs")
    role = check_key_recipient(state, task, msg.recipient)
    if find_key_box(state, task.id, msg.recipient) is not None:
        raise KeyAlreadyDelivered(f"{encode_address(msg.recipient)} already holds its box for task {task.id}")
    public_key = get_account(state, msg.recipient).pub_key
    if not public_key:
        raise NotKeyRecipient(f"the chain holds no public key for {encode_address(msg.recipient)}")
    check_sender_proof(public_key, msg.sealed_key, box_context(task.id), msg.sender_proof)
    put_key_box(state, task.id, msg.recipient, KeyBox(sealed=msg.sealed_key, delivered_height=ctx.env.height))
    task_event(ctx, task.id, "key_delivered", recipient=encode_address(msg.recipient), role=role)
