"""The market's named verbs over state: read and write records, move escrowed funds, keep the
indexes (open tasks, pending segments, the end-block schedule) consistent with the records.

Funds: the market module account `ESCROW` holds every task's remaining budget, every member's locked
collateral, every worker's stake and every unbonding worker stake. Funds enter and leave it only through
`escrow_in`, `escrow_out` and `escrow_burn`, and the invariant in `chain/modules/market.py` checks the sum.
"""

from __future__ import annotations

from typing import Iterator

from .. import keys
from ..accounts import burn, move_funds
from ..block import BlockContext
from ..codec import decode_u64, encode_u64
from ..crypto import module_address
from ..state import State
from .errors import TaskNotFound, WorkerNotRegistered
from .records import COMMIT, JOIN, LIVE_STATUSES, SAMPLING, VERIFY
from .records import Commitment, Member, R, Task, Vote, Worker, decode_record, encode_record

ESCROW = module_address("market_escrow")
"""The market's module account: task budgets, locked collateral and worker stakes."""

# Kinds of end-block work, the last byte of a schedule key.
JOIN_DEADLINE, ROUND_DEADLINE, SAMPLE, VERIFY_DEADLINE = 1, 2, 3, 4
SCHEDULE_KINDS = {JOIN_DEADLINE: "join_deadline", ROUND_DEADLINE: "round_deadline", SAMPLE: "sample",
                  VERIFY_DEADLINE: "verify_deadline"}


# -- funds ---------------------------------------------------------------------------------------------------
def escrow_in(state: State, sender: bytes, amount: int) -> None:
    move_funds(state, sender, ESCROW, amount)


def escrow_out(state: State, recipient: bytes, amount: int) -> None:
    move_funds(state, ESCROW, recipient, amount)


def escrow_burn(state: State, amount: int) -> None:
    burn(state, ESCROW, amount)


# -- workers -------------------------------------------------------------------------------------------------
def find_worker(state: State, address: bytes) -> Worker | None:
    raw = state.get(keys.market_worker_key(address))
    return None if raw is None else decode_record(Worker, raw)


def get_worker(state: State, address: bytes) -> Worker:
    worker = find_worker(state, address)
    if worker is None:
        raise WorkerNotRegistered(f"{address.hex()} is not a registered worker")
    return worker


def put_worker(state: State, worker: Worker) -> None:
    state.set(keys.market_worker_key(worker.address), encode_record(worker))


def delete_worker(state: State, address: bytes) -> None:
    state.delete(keys.market_worker_key(address))


def iterate_workers(state: State) -> Iterator[Worker]:
    for _, raw in state.iterate(keys.MARKET_WORKER):
        yield decode_record(Worker, raw)


def add_unbonding_stake(state: State, maturity_height: int, worker: bytes, amount: int) -> None:
    key = keys.market_worker_unbonding_key(maturity_height, worker)
    raw = state.get(key)
    state.set(key, encode_u64((decode_u64(raw) if raw else 0) + amount))
    state.set(keys.market_worker_unbonding_by_worker_key(worker, maturity_height), b"\x01")


def unbonding_of_worker(state: State, worker: bytes) -> list[tuple[int, int]]:
    """(maturity height, amount) of one worker's unbonding stakes, ascending by height."""
    prefix = keys.MARKET_WORKER_UNBONDING_BY_WORKER + worker
    found = []
    for key, _ in state.iterate(prefix):
        height = decode_u64(key[len(prefix):])
        found.append((height, decode_u64(state.get(keys.market_worker_unbonding_key(height, worker)))))
    return found


def unbonding_due(state: State, height: int) -> list[tuple[bytes, int]]:
    prefix = keys.MARKET_WORKER_UNBONDING + keys.u64(height)
    return [(key[len(prefix):], decode_u64(raw)) for key, raw in state.iterate(prefix)]


def delete_unbonding(state: State, height: int, worker: bytes) -> None:
    state.delete(keys.market_worker_unbonding_key(height, worker))
    state.delete(keys.market_worker_unbonding_by_worker_key(worker, height))


def iterate_unbonding(state: State) -> Iterator[tuple[int, bytes, int]]:
    """Every unbonding stake: (maturity height, worker, amount)."""
    for key, raw in state.iterate(keys.MARKET_WORKER_UNBONDING):
        rest = key[len(keys.MARKET_WORKER_UNBONDING):]
        yield decode_u64(rest[:8]), rest[8:], decode_u64(raw)


# -- tasks ---------------------------------------------------------------------------------------------------
def next_task_id(state: State) -> int:
    """Allocate a task id (ids start at 1)."""
    raw = state.get(keys.MARKET_NEXT_TASK_ID)
    task_id = decode_u64(raw) if raw else 1
    state.set(keys.MARKET_NEXT_TASK_ID, encode_u64(task_id + 1))
    return task_id


def find_task(state: State, task_id: int) -> Task | None:
    raw = state.get(keys.market_task_key(task_id))
    return None if raw is None else decode_record(Task, raw)


def get_task(state: State, task_id: int) -> Task:
    task = find_task(state, task_id)
    if task is None:
        raise TaskNotFound(f"no task {task_id}")
    return task


def shared_task(state: State, ctx: BlockContext, task_id: int) -> Task:
    """`get_task`, decoded once per block while its bytes stay the same (`shared_record`): read only."""
    task = shared_record(state, ctx, Task, keys.market_task_key(task_id))
    if task is None:
        raise TaskNotFound(f"no task {task_id}")
    return task


def shared_member(state: State, ctx: BlockContext, task_id: int, worker: bytes) -> Member | None:
    """`find_member`, decoded once per block while its bytes stay the same (`shared_record`): read only."""
    return shared_record(state, ctx, Member, keys.market_member_key(task_id, worker))


def shared_record(state: State, ctx: BlockContext, cls: type[R], key: bytes) -> R | None:
    """The record stored at `key` (None if none), the same object for every caller in the block while the
    key's bytes are unchanged (`BlockContext.decoded`). The caller must not change it: a handler that goes on
    to change and store the record copies it first."""
    raw = state.get(key)
    if raw is None:
        return None
    seen = ctx.decoded.get(key)
    if seen is not None and (seen[0] is raw or seen[0] == raw):
        return seen[1]
    record = decode_record(cls, raw)
    ctx.decoded[key] = (raw, record)
    return record


def put_task(state: State, task: Task) -> None:
    """Store the task, keeping the open-task index in step with its status."""
    state.set(keys.market_task_key(task.id), encode_record(task))
    if task.status in LIVE_STATUSES:
        state.set(keys.market_open_task_key(task.id), b"")
    else:
        state.delete(keys.market_open_task_key(task.id))


def put_spec(state: State, task_id: int, spec: bytes) -> None:
    state.set(keys.market_task_spec_key(task_id), spec)


def get_spec(state: State, task_id: int) -> bytes | None:
    return state.get(keys.market_task_spec_key(task_id))


def last_task_id(state: State) -> int:
    """The id of the last task submitted (0 before the first). Tasks are never deleted, so ids 1 to this are
    every task: a listing reads this one record, not a scan of every task's key (which no proof could cover)."""
    raw = state.get(keys.MARKET_NEXT_TASK_ID)
    return decode_u64(raw) - 1 if raw else 0


def iterate_tasks(state: State) -> Iterator[Task]:
    for _, raw in state.iterate(keys.MARKET_TASK):
        yield decode_record(Task, raw)


# -- members and commitments ---------------------------------------------------------------------------------
def find_member(state: State, task_id: int, worker: bytes) -> Member | None:
    raw = state.get(keys.market_member_key(task_id, worker))
    return None if raw is None else decode_record(Member, raw)


def put_member(state: State, member: Member) -> None:
    state.set(keys.market_member_key(member.task_id, member.worker), encode_record(member))


def delete_member(state: State, task_id: int, worker: bytes) -> None:
    state.delete(keys.market_member_key(task_id, worker))


def members_in_order(state: State, task: Task) -> list[Member]:
    """The task's members in join order (their worker index order)."""
    return [find_member(state, task.id, worker) for worker in task.members]


def find_commitment(state: State, task_id: int, round_: int, worker: bytes) -> Commitment | None:
    raw = state.get(keys.market_commit_key(task_id, round_, worker))
    return None if raw is None else decode_record(Commitment, raw)


def put_commitment(state: State, commitment: Commitment) -> None:
    key = keys.market_commit_key(commitment.task_id, commitment.round, commitment.worker)
    state.set(key, encode_record(commitment))


def shared_commitment(state: State, ctx: BlockContext, task_id: int, round_: int, worker: bytes) -> Commitment | None:
    """`find_commitment`, decoded once per block while its bytes stay the same (`shared_record`): read only. A
    block of verdicts or reveals reads each commitment at every vote on its segments."""
    return shared_record(state, ctx, Commitment, keys.market_commit_key(task_id, round_, worker))


def has_commitment(state: State, task_id: int, round_: int, worker: bytes) -> bool:
    """Whether `worker` committed in the round: one key lookup, nothing decoded."""
    return state.has(keys.market_commit_key(task_id, round_, worker))


def uncommitted(state: State, task: Task, round_: int) -> Iterator[bytes]:
    """The task's members (in worker-index order) with no commitment in the round: a key lookup each, the
    round's key prefix built once."""
    prefix = keys.market_round_commit_prefix(task.id, round_)
    for worker in task.members:
        if state.get(prefix + worker) is None:
            yield worker


def round_commitments(state: State, task: Task, round_: int) -> list[Commitment]:
    """The round's commitments in worker-index order."""
    return list(iter_round_commitments(state, task, round_))


def iter_round_commitments(state: State, task: Task, round_: int,
                           ctx: BlockContext | None = None) -> Iterator[Commitment]:
    """The round's commitments in worker-index order, each read and decoded only when the caller asks for it;
    with `ctx`, read shared (`shared_commitment`: read only)."""
    for worker in task.members:
        if ctx is None:
            commitment = find_commitment(state, task.id, round_, worker)
        else:
            commitment = shared_commitment(state, ctx, task.id, round_, worker)
        if commitment is not None:
            yield commitment


# -- verdicts and the segments awaiting them ------------------------------------------------------------------
def find_vote(state: State, task_id: int, round_: int, worker: bytes, segment: int, validator: bytes) -> Vote | None:
    raw = state.get(keys.market_vote_key(task_id, round_, worker, segment, validator))
    return None if raw is None else decode_record(Vote, raw)


def put_vote(state: State, task_id: int, round_: int, worker: bytes, segment: int, validator: bytes, vote: Vote,
             ctx: BlockContext | None = None) -> None:
    """Store the vote; with `ctx`, also keep it as the block's decoded record of its key (`shared_record`), so the
    tallies of the segment's later votes in the block do not decode it again: the caller must not change it."""
    key = keys.market_vote_key(task_id, round_, worker, segment, validator)
    raw = encode_record(vote)
    state.set(key, raw)
    if ctx is not None:
        ctx.decoded[key] = (raw, vote)


def delete_vote(state: State, task_id: int, round_: int, worker: bytes, segment: int, validator: bytes) -> None:
    state.delete(keys.market_vote_key(task_id, round_, worker, segment, validator))


def votes_of(state: State, task_id: int, round_: int, worker: bytes, segment: int,
             validators: list[bytes], ctx: BlockContext | None = None) -> list[tuple[bytes, Vote]]:
    """The votes on one segment of each of `validators` that voted: (validator, vote), ascending by validator.
    Key lookups, not a scan: within a block of verdicts, a scan under a segment's prefix also walks every vote
    the block wrote before it (`State.iterate`), so tallying each vote by a scan would cost the block the square
    of its votes. With `ctx` the votes are read shared (`shared_record`: read only), each decoded once per block."""
    found = []
    prefix = keys.market_segment_votes_prefix(task_id, round_, worker, segment)
    for validator in sorted(validators):
        if ctx is None:
            vote = find_vote(state, task_id, round_, worker, segment, validator)
        else:
            vote = shared_record(state, ctx, Vote, prefix + validator)
        if vote is not None:
            found.append((validator, vote))
    return found


def segment_votes(state: State, task_id: int, round_: int, worker: bytes, segment: int) -> list[tuple[bytes, Vote]]:
    """Every vote on one segment: (validator operator address, vote), ascending by validator, by a scan of its
    prefix: what `tally.committee_votes` must find by key. No query answers from it (no listing index covers
    the prefix, so no proof could cover the answer)."""
    prefix = keys.market_segment_votes_prefix(task_id, round_, worker, segment)
    return [(key[len(prefix):], decode_record(Vote, raw)) for key, raw in state.iterate(prefix)]


def mark_pending(state: State, task_id: int, round_: int, worker: bytes, segment: int) -> None:
    state.set(keys.market_pending_segment_key(task_id, round_, worker, segment), b"")


def unmark_pending(state: State, task_id: int, round_: int, worker: bytes, segment: int) -> None:
    state.delete(keys.market_pending_segment_key(task_id, round_, worker, segment))


def is_pending(state: State, task_id: int, round_: int, worker: bytes, segment: int) -> bool:
    return state.has(keys.market_pending_segment_key(task_id, round_, worker, segment))


def pending_segments(state: State, task_id: int | None = None) -> Iterator[tuple[int, int, bytes, int]]:
    """Segments awaiting verdicts: (task id, round, worker, segment), ascending."""
    prefix = keys.MARKET_PENDING_SEGMENT + (keys.u64(task_id) if task_id is not None else b"")
    for key, _ in state.iterate(prefix):
        rest = key[len(keys.MARKET_PENDING_SEGMENT):]
        yield decode_u64(rest[0:8]), decode_u64(rest[8:16]), rest[16:36], decode_u64(rest[36:44])


# -- the end-block schedule ----------------------------------------------------------------------------------
def phase_kind(phase: str) -> int | None:
    """The schedule kind that ends a phase (None for `done`, which has no deadline)."""
    return {JOIN: JOIN_DEADLINE, COMMIT: ROUND_DEADLINE, SAMPLING: SAMPLE, VERIFY: VERIFY_DEADLINE}.get(phase)


def enter_phase(state: State, task: Task, phase: str, deadline: int) -> None:
    """Move the task to `phase`, whose end-block work falls due at `deadline`; the old entry is removed, so
    a task has at most one schedule entry at any time."""
    unschedule(state, task)
    task.phase = phase
    kind = phase_kind(phase)
    if kind is not None:
        state.set(keys.market_schedule_key(deadline, task.id, kind), b"")
        task.phase_deadline = deadline


def unschedule(state: State, task: Task) -> None:
    """Remove the task's pending schedule entry, if any."""
    kind = phase_kind(task.phase)
    if task.phase_deadline and kind is not None:
        state.delete(keys.market_schedule_key(task.phase_deadline, task.id, kind))
    task.phase_deadline = 0


def due(state: State, height: int) -> list[tuple[int, int]]:
    """(task id, kind) of the work due at `height`, in key order: O(entries at this height)."""
    prefix = keys.MARKET_SCHEDULE + keys.u64(height)
    return [(decode_u64(key[len(prefix):len(prefix) + 8]), key[-1]) for key, _ in state.iterate(prefix)]


def remove_due(state: State, height: int, task_id: int, kind: int) -> None:
    state.delete(keys.market_schedule_key(height, task_id, kind))
