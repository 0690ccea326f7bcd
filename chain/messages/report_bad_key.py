"""market `MsgReportBadKey`: a recipient of a private task's data key proves its box bad (docs/privacy.md).

The sender must hold a box for the task (`NoKeyBox` otherwise), not reported yet. Its `proof`
(`box_proofs.PROOF_BYTES`) shows the X25519 shared secret of the box's ephemeral key and the sender's recorded
ed25519 key without revealing the sender's secret key, and the chain opens the box with it
(`box_proofs.check_box_complaint`; a proof that does not check is refused). The report is accepted when the box
does not open, or opens to a key whose `data_key_hash` is not the task's; it is refused (`KeyBoxGood`) when
the box holds the committed key, so an honest requester never pays for a report.

Accepted from an active member: the member is released (`lifecycle.release_member`: collateral in full and a
compensation out of the requester's escrow) and its slot reopens; the round no longer waits for it. A member
that committed in the current round cannot report (`KeyReportRefused`: a box it could not open gave it
nothing to train with, and a release must not let it escape that commitment's verdict). Accepted from a drawn
validator: it owes no vote on the task, and a segment its missing key left undecidable is paid as passed
(`key_faults.undecidable_for_want_of_keys`).
"""

from __future__ import annotations

from ..accounts import get_account
from ..block import BlockContext
from ..box_proofs import PROOF_BYTES, check_box_complaint
from ..crypto import encode_address
from ..errors import InvalidRequest
from ..market.data_keys import data_key_hash, find_key_box, put_key_box
from ..market.errors import KeyBoxGood, KeyReportRefused, NoKeyBox, TaskEnded
from ..market.events import task_event
from ..market.lifecycle import release_member
from ..market.records import ACTIVE, LIVE_STATUSES
from ..market.round_lifecycle import close_when_all_committed
from ..market.store import find_commitment, find_member, get_task, put_task
from ..proto.market_pb2 import MsgReportBadKey
from ..state import State


def validate_report_bad_key(msg: MsgReportBadKey) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")
    if len(msg.proof) != PROOF_BYTES:
        raise InvalidRequest(f"proof must be {PROOF_BYTES} bytes")


def process_report_bad_key(state: State, ctx: BlockContext, signer: bytes, msg: MsgReportBadKey) -> None:
    task = get_task(state, msg.task_id)
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    box = find_key_box(state, task.id, signer)
    if box is None:
        raise NoKeyBox(f"{encode_address(signer)} holds no data key box for task {task.id}")
    if box.reported_height:
        raise KeyReportRefused(f"the box of {encode_address(signer)} was already reported bad at height "
                               f"{box.reported_height}")
    member = find_member(state, task.id, signer)
    active = member is not None and member.status == ACTIVE
    if active and find_commitment(state, task.id, task.round, signer) is not None:
        raise KeyReportRefused(f"{encode_address(signer)} committed in round {task.round} of task {task.id}: a "
                               f"bad box is reported before committing")
    opened = check_box_complaint(get_account(state, signer).pub_key, box.sealed, msg.proof)
    if opened is not None and data_key_hash(opened) == task.data_key_hash:
        raise KeyBoxGood(f"the box of {encode_address(signer)} holds task {task.id}'s committed data key")
    box.reported_height = ctx.env.height
    put_key_box(state, task.id, signer, box)
    task_event(ctx, task.id, "bad_key_reported", recipient=encode_address(signer),
               opened=int(opened is not None))
    if active:
        release_member(state, ctx, task, member, "bad data key")
        close_when_all_committed(state, ctx, task)
    put_task(state, task)
