"""`/market/verify/<validator>`: the segments a validator must verify now, found through the records that name
them, so that the answer is proven like any other (docs/protocol.md 4.7a).

The pending-segment keys (`keys.MARKET_PENDING_SEGMENT`) say which segments await verdicts, but listing them is a
scan of a prefix no listing index covers, and an index of them would cost every sampling and verdicts block a
rewrite per task. The records name the same segments: a segment awaits verdicts only while its task is live
(`keys.MARKET_OPEN_TASK`, which has a listing index) and in its verification phase, and only in the task's
current round, on a member's commitment still pending whose decision of that segment is still undecided (the
pending key is set when the segment is sampled and cleared when it is decided, when its commitment fails, at
settlement and at the task's end: `round_lifecycle`, `tally`, `lifecycle`). So the answer walks the open tasks,
reads each verifying task's members' commitments by key, and keeps a segment only if its pending key is present
too (read by key, so proven present). Every read is by key or through a listing index: a client that re-runs this
over the proven values gets the answer, and a segment left out, a vote hidden or a committee changed is caught.
Ascending by (task, round, worker, segment): the order of the pending keys, as the scan answered before.
"""

from __future__ import annotations

from .. import keys
from ..codec import decode_u64
from ..crypto import encode_address
from ..listing_index import indexed_keys
from ..state import State
from .records import PENDING, UNDECIDED, VERIFY, Commitment, Task
from .store import find_commitment, find_member, find_task, find_vote, find_worker, is_pending
from .tally import on_committee


def pending_in_records(state: State) -> list[tuple[Task, Commitment, int]]:
    """(task, commitment, segment) of every segment awaiting verdicts, ascending by (task id, round, worker,
    segment), found from the open tasks' records and confirmed by each segment's pending key."""
    found = []
    for key in indexed_keys(state, keys.MARKET_OPEN_TASK):
        task = find_task(state, decode_u64(key[len(keys.MARKET_OPEN_TASK):]))
        if task is None or task.phase != VERIFY:
            continue
        for worker in sorted(task.members):
            commitment = find_commitment(state, task.id, task.round, worker)
            if commitment is None or commitment.outcome != PENDING:
                continue
            for segment, decision in sorted(zip(commitment.segments, commitment.decisions)):
                if decision == UNDECIDED and is_pending(state, task.id, task.round, worker, segment):
                    found.append((task, commitment, segment))
    return found


def verify_work(state: State, validator: bytes) -> list[dict]:
    """The segments awaiting verdicts on whose committee `validator` sits and on which it has not voted yet (never
    its own work), each with what its verifier needs to replay it."""
    work = []
    for task, commitment, segment in pending_in_records(state):
        worker = commitment.worker
        if worker == validator or not on_committee(commitment, segment, validator):
            continue
        if find_vote(state, task.id, task.round, worker, segment, validator) is not None:
            continue
        work.append(_work_item(state, task, commitment, segment))
    return work


def _work_item(state: State, task: Task, commitment: Commitment, segment: int) -> dict:
    worker = commitment.worker
    previous = find_commitment(state, task.id, task.round - 1, worker) if task.round > 0 else None
    member = find_member(state, task.id, worker)
    worker_record = find_worker(state, worker)
    return {
        "task_id": task.id, "round": task.round, "worker": encode_address(worker), "worker_index": member.index,
        "segment": segment, "spec_hash": task.spec_hash.hex(), "update_hash": commitment.update_hash.hex(),
        "checkpoint_root": commitment.checkpoint_root.hex(), "num_checkpoints": commitment.num_checkpoints,
        "steps": commitment.steps, "samples_processed": commitment.samples_processed,
        "start_weights_hash": commitment.start_weights_hash.hex(),
        "determinism_profile": commitment.determinism_profile,
        "residual_hash": commitment.residual_hash.hex(),
        "previous_residual_hash": previous.residual_hash.hex() if previous is not None else "",
        "blob_url": worker_record.blob_url if worker_record else "",
        "relay": worker_record.relay if worker_record else "", "deadline": task.phase_deadline,
    }
