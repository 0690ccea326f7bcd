"""market `MsgSubmitVerdict`: a validator's verdict on one sampled segment (docs/protocol.md section 4).

Only the operator account of an active validator on the segment's committee may vote, once per (validator,
worker, round, segment), never on its own work, and only on a segment still awaiting verdicts. The vote
carries a commitment to its replay digest, opened after the round settles (`MsgRevealReplay`); a vote on a
GPU-trained segment by a validator that did not declare that GPU is recorded as a CPU replay (`Vote.cpu_replay`),
whose digest is compared only with other CPU replays. A validator
sends its whole round's verdicts as the messages of one transaction; a verdict on a sampled segment of the round
that other votes decided meanwhile is accepted and not counted (`verdict_late`), so that the transaction's
other verdicts still count. The tally runs at once; when every worker of the round is
decided, the round settles at the end of this block.
"""

from __future__ import annotations

from ..block import BlockContext
from ..crypto import ADDRESS_LENGTH, encode_address
from ..errors import InvalidRequest
from ..market.errors import DuplicateVerdict, InvalidVerdict, NotOnCommittee, NotSampled, NotValidator, SelfVerdict
from ..market.events import task_event
from ..market.power import shared_power
from ..market.replay_gpus import get_replay_gpus, gpu_part_of
from ..market.records import PENDING, UNDECIDED, VERDICT_NAMES, VERIFY, Vote
from ..market.store import enter_phase, find_commitment, find_vote, get_task, is_pending, iter_round_commitments
from ..market.store import put_commitment, put_task, put_vote, shared_commitment, shared_task
from ..market.tally import apply_decision, awaiting_votes, on_committee, round_undecided, tally_segment
from ..proto.market_pb2 import MsgSubmitVerdict
from ..state import State


def validate_submit_verdict(msg: MsgSubmitVerdict) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")
    if len(msg.worker) != ADDRESS_LENGTH:
        raise InvalidVerdict(f"worker must be a {ADDRESS_LENGTH}-byte address")
    if msg.verdict not in VERDICT_NAMES:
        raise InvalidVerdict("verdict must be PASS (1), FAIL (2) or UNAVAILABLE (3)")
    if len(msg.evidence_hash) != 32:
        raise InvalidVerdict("evidence_hash must be 32 bytes")
    if len(msg.replay_commitment) != 32:
        raise InvalidVerdict("replay_commitment must be 32 bytes")


def process_submit_verdict(state: State, ctx: BlockContext, signer: bytes, msg: MsgSubmitVerdict) -> None:
    """The task, the commitment, the validators' records and the votes are read shared (`store.shared_record`,
    decoded once per block while their bytes stay the same): a block carries a round's verdicts, several on each
    commitment and every committee member's on each segment. What the handler changes it reads afresh."""
    if shared_power(state, ctx, signer) <= 0:
        raise NotValidator("verdicts come only from the operator account of an active validator")
    if signer == msg.worker:
        raise SelfVerdict("a validator may not vote on segments of its own work")
    task = shared_task(state, ctx, msg.task_id)
    if find_vote(state, task.id, msg.round, msg.worker, msg.segment, signer) is not None:
        raise DuplicateVerdict(f"this validator already voted on segment {msg.segment} of "
                               f"{encode_address(msg.worker)} in round {msg.round} of task {task.id}")
    commitment = shared_commitment(state, ctx, task.id, msg.round, msg.worker)
    if (task.phase != VERIFY or msg.round != task.round or commitment is None
            or msg.segment not in commitment.segments):
        raise NotSampled(f"segment {msg.segment} of {encode_address(msg.worker)} in round {msg.round} of task "
                         f"{task.id} is not awaiting verdicts")
    if not on_committee(commitment, msg.segment, signer):
        raise NotOnCommittee(f"{encode_address(signer)} is not on the committee of segment {msg.segment} of "
                             f"{encode_address(msg.worker)} in round {msg.round} of task {task.id}")
    if not is_pending(state, task.id, msg.round, msg.worker, msg.segment):
        # Decided by earlier votes (or its worker's round already failed) while this round's verification is
        # still open: nothing left to count. Not an error, so the validator's other verdicts in the same
        # transaction still count.
        task_event(ctx, task.id, "verdict_late", round=msg.round, worker=encode_address(msg.worker),
                   segment=msg.segment, validator=encode_address(signer))
        return

    gpu = gpu_part_of(commitment.determinism_profile)
    put_vote(state, task.id, msg.round, msg.worker, msg.segment, signer,
             Vote(verdict=msg.verdict, evidence_hash=msg.evidence_hash, height=ctx.env.height,
                  replay_commitment=msg.replay_commitment,
                  cpu_replay=int(gpu is not None and gpu not in get_replay_gpus(state, signer))), ctx)
    task_event(ctx, task.id, "verdict", round=msg.round, worker=encode_address(msg.worker), segment=msg.segment,
               validator=encode_address(signer), verdict=VERDICT_NAMES[msg.verdict])
    if awaiting_votes(state, ctx, commitment, msg.segment):
        return  # undecided: `tally_segment` would say so, after reading every member's vote and power
    decision = tally_segment(state, commitment, msg.segment, ctx=ctx)
    if decision == UNDECIDED:
        return
    commitment = find_commitment(state, task.id, msg.round, msg.worker)  # its own copy, to change
    apply_decision(state, commitment, msg.segment, decision)
    put_commitment(state, commitment)
    task_event(ctx, task.id, "segment_decided", round=msg.round, worker=encode_address(msg.worker),
               segment=msg.segment, decision=decision, outcome=commitment.outcome)
    # While this worker's round is pending, so is the task's: only a decision that ended it may end the round.
    if commitment.outcome != PENDING and not round_undecided(iter_round_commitments(state, task, task.round, ctx)):
        task = get_task(state, task.id)  # its own copy, to change
        enter_phase(state, task, VERIFY, ctx.env.height)  # settle at the end of this block
        put_task(state, task)
