"""market `MsgRevealReplay`: a voter opens its vote's replay commitment (docs/protocol.md section 4.4b).

Accepted from the validator that voted on the segment, once, after the round settled and until its reveal
deadline, and only when sha256(tag || operator || salt || replay_digest) equals the vote's commitment. What
happens to voters whose reveal is missing or disagrees is decided when the window closes (`market.reveals`),
which then deletes the round's votes (`market.vote_pruning`): a reveal after that is refused as too late.
"""

from __future__ import annotations

from ..block import BlockContext
from ..crypto import ADDRESS_LENGTH, encode_address
from ..errors import InvalidRequest
from ..market.errors import InvalidReveal
from ..market.reveals import replay_commitment
from ..market.store import find_vote, put_vote, shared_commitment, shared_task
from ..market.vote_pruning import votes_deleted
from ..proto.market_pb2 import MsgRevealReplay
from ..state import State


def validate_reveal_replay(msg: MsgRevealReplay) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")
    if len(msg.worker) != ADDRESS_LENGTH:
        raise InvalidReveal(f"worker must be a {ADDRESS_LENGTH}-byte address")
    if len(msg.salt) != 32 or len(msg.replay_digest) != 32:
        raise InvalidReveal("salt and replay_digest must be 32 bytes each")


def process_reveal_replay(state: State, ctx: BlockContext, signer: bytes, msg: MsgRevealReplay) -> None:
    """The task and the commitment are only read, shared (`store.shared_record`, decoded once per block): a block
    carries a round's reveals, every committee member's on each sampled segment of each commitment."""
    task = shared_task(state, ctx, msg.task_id)
    where = f"segment {msg.segment} of {encode_address(msg.worker)} in round {msg.round} of task {task.id}"
    vote = find_vote(state, task.id, msg.round, msg.worker, msg.segment, signer)
    commitment = shared_commitment(state, ctx, task.id, msg.round, msg.worker)
    if vote is None and commitment is not None and votes_deleted(task, commitment):
        raise InvalidReveal(f"the reveal window of round {msg.round} of task {task.id} closed"
                            + (f" at height {commitment.reveal_deadline}" if commitment.reveal_deadline else "")
                            + ": its votes are deleted")
    if vote is None:
        raise InvalidReveal(f"{encode_address(signer)} did not vote on {where}")
    if vote.replay_digest:
        raise InvalidReveal(f"{encode_address(signer)} already revealed its replay digest of {where}")
    if not commitment.reveal_deadline or ctx.env.height > commitment.reveal_deadline:
        raise InvalidReveal(f"reveals of round {msg.round} of task {task.id} are accepted after it settles and "
                            f"until its reveal deadline (height {commitment.reveal_deadline or 'not yet set'})")
    if replay_commitment(signer, msg.salt, msg.replay_digest) != vote.replay_commitment:
        raise InvalidReveal(f"salt and replay_digest do not open the replay commitment of the vote on {where}")
    vote.replay_digest = msg.replay_digest
    put_vote(state, task.id, msg.round, msg.worker, msg.segment, signer, vote)
