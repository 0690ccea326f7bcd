"""market `MsgCommitRound`: a member's commitment for the current round (docs/protocol.md sections 2 and 4).

For a training round (round < rounds) every field is required and must agree with the spec: 1 <= steps <=
inner_steps, num_checkpoints = ceil(steps / checkpoint_every) + 1, samples_processed = steps x batch_size.
`residual_hash` names the worker's error-feedback residual after this round's update: with it, the update is
a function of committed data (W_r, the round's last checkpoint and the previous round's residual), which
verifiers recompute (docs/protocol.md 2a and 4.4a).
The determinism profile must be one the chain knows, of a kernel the task's spec allows (`determinism.kernels`:
PyTorch's CPU and GPU profiles, the browser kernel's `wasm32`), and a GPU one must name a GPU whose declared replayers hold
more than a third of the power (`market.profiles`): else the work could be judged by a minority, and is refused.
For the final report (round == rounds) only start_weights_hash is set: the hash of the final weights.
The commit phase closes in the block in which the last active member commits (a replacement counts from its
first round: before it, it may not commit and is not waited for).
"""

from __future__ import annotations

import copy

from ..block import BlockContext
from ..crypto import encode_address
from ..errors import InvalidRequest
from ..market.economics import segment_count
from ..market.errors import AlreadyCommitted, InvalidCommitment, NotMember, RoundClosed, TaskEnded
from ..market.events import task_event
from ..market.params import MarketParams
from ..market.profiles import check_replayable
from ..market.records import ACTIVE, COMMIT, LIVE_STATUSES, RUNNING, Commitment, Task
from ..market.round_lifecycle import all_due_committed
from ..market.store import enter_phase, has_commitment, put_commitment, put_task, shared_member, shared_task
from ..params import get_params
from ..proto.market_pb2 import MsgCommitRound
from ..state import State

HASH_LENGTH = 32


def validate_commit_round(msg: MsgCommitRound) -> None:
    if msg.task_id == 0:
        raise InvalidRequest("task_id must be set")
    if len(msg.start_weights_hash) != HASH_LENGTH:
        raise InvalidCommitment("start_weights_hash must be 32 bytes")
    for name in ("update_hash", "checkpoint_root", "residual_hash"):
        if len(getattr(msg, name)) not in (0, HASH_LENGTH):
            raise InvalidCommitment(f"{name} must be 32 bytes")


def check_training_commitment(msg: MsgCommitRound, task: Task, params: MarketParams) -> None:
    if len(msg.update_hash) != HASH_LENGTH or len(msg.checkpoint_root) != HASH_LENGTH:
        raise InvalidCommitment("update_hash and checkpoint_root must be 32 bytes")
    if len(msg.residual_hash) != HASH_LENGTH:
        raise InvalidCommitment("residual_hash must be 32 bytes: the update is checked against it")
    if not 1 <= msg.steps <= task.inner_steps:
        raise InvalidCommitment(f"steps must be within 1..{task.inner_steps} (the spec's inner_steps), got {msg.steps}")
    expected = segment_count(msg.steps, task.checkpoint_every) + 1
    if msg.num_checkpoints != expected:
        raise InvalidCommitment(f"{msg.steps} steps with a checkpoint every {task.checkpoint_every} make "
                                f"{expected} checkpoints, not {msg.num_checkpoints}")
    if msg.samples_processed != msg.steps * task.batch_size:
        raise InvalidCommitment(f"samples_processed must be steps x batch_size = {msg.steps * task.batch_size}")
    if not msg.determinism_profile or len(msg.determinism_profile.encode()) > params.max_profile_bytes:
        raise InvalidCommitment(f"determinism_profile must be 1..{params.max_profile_bytes} bytes")


def check_final_report(msg: MsgCommitRound) -> None:
    if (msg.update_hash or msg.checkpoint_root or msg.residual_hash or msg.steps or msg.samples_processed
            or msg.num_checkpoints):
        raise InvalidCommitment("the final report carries only start_weights_hash (the final weights' hash)")


def process_commit_round(state: State, ctx: BlockContext, signer: bytes, msg: MsgCommitRound) -> None:
    """Store the commitment, and close the round when it was the last one due. The task and member records are
    read shared (`shared_task`): a block carries a commitment from each of a task's members, and only the last
    one changes the task, on a copy."""
    task = shared_task(state, ctx, msg.task_id)
    if task.status not in LIVE_STATUSES:
        raise TaskEnded(f"task {task.id} already ended ({task.status})")
    if task.status != RUNNING or task.phase != COMMIT or msg.round != task.round:
        raise RoundClosed(f"task {task.id} is not taking commitments for round {msg.round} "
                          f"(round {task.round}, phase {task.phase})")
    member = shared_member(state, ctx, task.id, signer)
    if member is None or member.status != ACTIVE:
        raise NotMember(f"not an active member of task {task.id}")
    if msg.round < member.first_round:
        raise RoundClosed(f"a replacement in task {task.id} trains from round {member.first_round}, not {msg.round}")
    if has_commitment(state, task.id, msg.round, signer):
        raise AlreadyCommitted(f"already committed for round {msg.round} of task {task.id}")
    if msg.round == task.rounds:
        check_final_report(msg)
    else:
        check_training_commitment(msg, task, get_params(state, MarketParams))
        check_replayable(state, msg.determinism_profile, signer, task.kernels)

    put_commitment(state, Commitment(
        task_id=task.id, round=msg.round, worker=signer, update_hash=msg.update_hash,
        samples_processed=msg.samples_processed, steps=msg.steps, checkpoint_root=msg.checkpoint_root,
        num_checkpoints=msg.num_checkpoints, start_weights_hash=msg.start_weights_hash,
        determinism_profile=msg.determinism_profile, height=ctx.env.height, residual_hash=msg.residual_hash,
    ))
    task_event(ctx, task.id, "committed", round=msg.round, worker=encode_address(signer),
               update_hash=msg.update_hash.hex(), start_weights_hash=msg.start_weights_hash.hex())
    if all_due_committed(state, ctx, task):  # close the round at the end of this block
        task = copy.copy(task)  # the shared record stays as stored; a shallow copy will do: only scalars change
        enter_phase(state, task, COMMIT, ctx.env.height)
        put_task(state, task)  # else the task is as it was stored: writing it again would change nothing
