"""Members coming and going, and tasks starting and ending.

A member leaves a running task in one of five ways: dropped (missed a deadline or lost the weights
agreement: a penalty is burned and the rest of its collateral returned at once), slashed (a two-thirds
adverse verdict: all its collateral taken), left (it asked to, `MsgLeaveTask`), released (its private task's
data key never came in time or was proven bad: collateral in full and a compensation from the requester's
escrow, `release_member`) or finished (the task ended: collateral returned in full). A member of a private
task that holds its data key forfeits its whole collateral however it leaves before the end, dropped or asking
(`key_faults.holds_key`): that is what collecting a key costs. Asking to leave cannot escape a verdict or take
pay for nothing:
- a member with no commitment in the current round leaves at once as a drop with reason "left" (it took the
  round's place and gave nothing: the missed-round penalty is burned, the rest returned), and the round no
  longer waits for it;
- a member whose commitment in the current round awaits verification is marked `leaving` and leaves when that
  round settles, where the round's verdicts are applied (`release_leavers`): slashed if the round failed it,
  else paid for the round as usual and its collateral returned in full;
- a member of a task not yet started leaves at once with its collateral in full, and its place reopens.
The slot of a member who was dropped, slashed or left opens when the next round starts, and a replacement may
join into it (`join_open_slot`): it locks the same collateral, takes the slot's worker index and trains from
the round after the one in which it joined (docs/protocol.md 4.1c). A task ends completed, cancelled, expired
(never filled) or abandoned (no active member left); in every case the unspent budget goes back to the
requester and nothing of the task remains in escrow. A task starts when its last condition becomes true,
whatever made it true (`start_if_ready`): today the only one is that every wanted worker joined.
"""

from __future__ import annotations

from ..block import BlockContext
from ..crypto import encode_address
from ..state import State
from .data_keys import delete_task_keys
from .economics import fee_of, split_by_power
from .events import task_event
from .errors import TaskNotOpen
from .key_faults import holds_key, key_compensation, key_late
from .records import ACTIVE, COMMIT, DONE, DROPPED, FINISHED, LEFT, OPEN, RUNNING, SLASHED, Commitment, Member, Task
from .store import delete_member, enter_phase, escrow_burn, escrow_in, escrow_out, find_commitment, find_member
from .store import get_worker, members_in_order, pending_segments, put_commitment, put_member, put_worker
from .store import unmark_pending
from .vote_pruning import forget_unsettled_votes


def _leave(state: State, task: Task, member: Member, status: str, reason: str) -> None:
    """Bookkeeping common to every way out: the member is no longer active, the worker is free of the task."""
    member.status = status
    member.reason = reason
    member.left_round = task.round if status != FINISHED else member.left_round
    put_member(state, member)
    if status in (DROPPED, SLASHED, LEFT) and task.status == RUNNING:
        task.vacated.append(member.index)  # opens when the next round starts (`start_round`)
    task.active_members -= 1
    worker = get_worker(state, member.worker)
    worker.tasks = [t for t in worker.tasks if t != task.id]
    put_worker(state, worker)


def departure_penalty(state: State, task: Task, member: Member) -> int:
    """What a member forfeits by leaving early: its whole collateral when it holds the private task's data key,
    else the missed-round penalty."""
    if holds_key(state, task, member.worker):
        return member.collateral
    return fee_of(member.collateral, task.terms["missed_round_penalty_bps"])


def drop_member(state: State, ctx: BlockContext, task: Task, member: Member, reason: str) -> None:
    """Drop a member that missed a round or lost the weights agreement: burn its departure penalty, return the
    rest of its collateral."""
    penalty = departure_penalty(state, task, member)
    returned = member.collateral - penalty
    escrow_burn(state, penalty)
    escrow_out(state, member.worker, returned)
    member.penalized += penalty
    member.collateral = 0
    worker = get_worker(state, member.worker)
    worker.penalized += penalty
    put_worker(state, worker)
    _leave(state, task, member, DROPPED, reason)
    task_event(ctx, task.id, "dropped", round=task.round, worker=encode_address(member.worker), reason=reason,
               penalty=penalty, returned=returned)


def miss_round(state: State, ctx: BlockContext, task: Task, member: Member) -> None:
    """A member due this round did not commit by its deadline: released when its private task's data key did not
    come in time (the requester's fault, `key_faults.key_late`), else dropped."""
    if key_late(state, task, member):
        release_member(state, ctx, task, member, "no data key in time")
    else:
        drop_member(state, ctx, task, member, "missed round")


def release_member(state: State, ctx: BlockContext, task: Task, member: Member, reason: str) -> None:
    """Let a member go through the requester's fault (its data key never came in time, or was proven bad): its
    collateral in full, and a compensation out of the requester's escrow (covered by the budget's key reserve;
    never more than is left). Its slot reopens as after a leave."""
    returned = member.collateral
    compensation = min(key_compensation(member.collateral, task.terms["missed_round_penalty_bps"]), task.escrow)
    escrow_out(state, member.worker, returned + compensation)
    task.escrow -= compensation
    member.collateral = 0
    member.compensated += compensation
    _leave(state, task, member, LEFT, reason)
    task_event(ctx, task.id, "released", round=task.round, worker=encode_address(member.worker), reason=reason,
               returned=returned, compensation=compensation)


def leave_task(state: State, ctx: BlockContext, task: Task, member: Member) -> None:
    """A member of a running task asks to leave: at once when it has no commitment in the current round (a drop
    with reason "left"), else when that round settles (`release_leavers`), so its verdict still applies."""
    if member.first_round <= task.round and find_commitment(state, task.id, task.round, member.worker) is not None:
        member.leaving = 1
        put_member(state, member)
        task_event(ctx, task.id, "leave_requested", round=task.round, worker=encode_address(member.worker))
    else:
        drop_member(state, ctx, task, member, "left")


def release_leavers(state: State, ctx: BlockContext, task: Task) -> None:
    """At a round's settlement, after its verdicts are applied: each member that asked to leave and was not
    slashed leaves with its collateral in full (it was paid for the round with the others), but for one holding
    its private task's data key, which forfeits it (burned)."""
    for member in members_in_order(state, task):
        if member.status != ACTIVE or not member.leaving:
            continue
        forfeited = member.collateral if holds_key(state, task, member.worker) else 0
        returned = member.collateral - forfeited
        escrow_out(state, member.worker, returned)
        escrow_burn(state, forfeited)
        member.penalized += forfeited
        member.collateral = 0
        if forfeited:
            worker = get_worker(state, member.worker)
            worker.penalized += forfeited
            put_worker(state, worker)
        _leave(state, task, member, LEFT, "left")
        task_event(ctx, task.id, "left", round=task.round, worker=encode_address(member.worker), returned=returned,
                   forfeited=forfeited)


def leave_open_task(state: State, ctx: BlockContext, task: Task, member: Member) -> None:
    """A member leaves a task that has not started: nobody trained, so its collateral comes back in full and
    its place reopens. It is no member any more (it may join again): the members after it move up one place,
    so the worker indexes stay the join positions 0..n-1. No data key is delivered before the start, so it
    leaves holding none."""
    escrow_out(state, member.worker, member.collateral)
    position = task.members.index(member.worker)
    task.members.pop(position)
    delete_member(state, task.id, member.worker)
    for index, address in enumerate(task.members[position:], start=position):
        later = find_member(state, task.id, address)
        later.index = index
        put_member(state, later)
    task.active_members -= 1
    worker = get_worker(state, member.worker)
    worker.tasks = [t for t in worker.tasks if t != task.id]
    put_worker(state, worker)
    task_event(ctx, task.id, "left", worker=encode_address(member.worker), returned=member.collateral)


def slash_member(state: State, ctx: BlockContext, task: Task, member: Member, commitment: Commitment,
                 voters: list[tuple[bytes, int, bool]]) -> None:
    """Take a caught cheater's whole collateral: `slash_verifier_bps` of it is shared by power among the
    validators whose verdicts decided against it (`tally.slash_voters`, from its failed `commitment`). The shares
    of those who replayed (voted FAIL) are held on the commitment until the round's reveal window closes and
    paid only to those whose reveals check out (`reveals.settle_slash_shares`): a FAIL vote cast without a
    replay earns nothing. The shares of those who only voted UNAVAILABLE are burned at once with the rest.
    Burned, not refunded to the requester: a requester may run validators too, and must not gain from calling
    its workers unavailable."""
    amount = member.collateral
    shares = split_by_power(fee_of(amount, task.terms["slash_verifier_bps"]) if voters else 0,
                            [(validator, power) for validator, power, _ in voters])
    replayed = {validator for validator, _, did_replay in voters if did_replay}
    commitment.held_slash_shares = {validator.hex(): share for validator, share in shares
                                    if validator in replayed and share}
    put_commitment(state, commitment)
    held = sum(commitment.held_slash_shares.values())
    task.held_fees += held
    escrow_burn(state, amount - held)
    member.slashed += amount
    member.collateral = 0
    worker = get_worker(state, member.worker)
    worker.slashed += amount
    put_worker(state, worker)
    _leave(state, task, member, SLASHED, "verification failed")
    task_event(ctx, task.id, "slash", round=task.round, worker=encode_address(member.worker), amount=amount,
               held_for_verifiers=held, burned=amount - held)


def ready_to_start(task: Task) -> bool:
    """An open task whose every wanted worker joined: nothing else holds a start back (a private task's data
    key is delivered after it, docs/privacy.md)."""
    return task.status == OPEN and len(task.members) == task.workers_wanted


def start_if_ready(state: State, ctx: BlockContext, task: Task) -> bool:
    """Start the task when its conditions hold, whatever made them true: called where one may have become true
    (a join), and by the end block at the task's join deadline before it would expire it."""
    if not ready_to_start(task):
        return False
    start_task(state, ctx, task)
    return True


def start_task(state: State, ctx: BlockContext, task: Task) -> None:
    """All wanted workers joined: round 0 begins now."""
    task.status = RUNNING
    task.started_height = ctx.env.height
    task_event(ctx, task.id, "started", workers=len(task.members))
    start_round(state, ctx, task, 0)


def join_open_slot(state: State, ctx: BlockContext, task: Task, worker: bytes) -> Member:
    """A registered worker joins a running task into its lowest open slot: its collateral is locked as an
    opening member's, it takes the slot's worker index (so the batches it draws are the slot's) and it trains
    from the next round, never the current one, whose start weights and deadline were set without it."""
    if not task.open_slots:
        raise TaskNotOpen(f"task {task.id} is running with no open slot ({task.active_members} of "
                          f"{task.workers_wanted} members active; a slot opens at the round after a member leaves)")
    if task.cancel_requested:
        raise TaskNotOpen(f"task {task.id} is cancelled; it ends when round {task.round} settles")
    if task.round + 1 >= task.rounds:
        raise TaskNotOpen(f"task {task.id} has no training round left for a replacement (round {task.round} of "
                          f"{task.rounds})")
    if task.replacements >= task.workers_wanted:
        raise TaskNotOpen(f"task {task.id} already took {task.replacements} replacements, its limit")
    escrow_in(state, worker, task.collateral)
    index = task.open_slots.pop(0)
    task.replacements += 1
    member = Member(task_id=task.id, worker=worker, index=index, status=ACTIVE, collateral=task.collateral,
                    joined_height=ctx.env.height, first_round=task.round + 1)
    task_event(ctx, task.id, "joined", worker=encode_address(worker), index=index, collateral=task.collateral,
               first_round=member.first_round)
    return member


def start_round(state: State, ctx: BlockContext, task: Task, round_: int) -> None:
    """Open round `round_`'s commit phase (round == rounds is the final report of the weights' hash); the slots
    of members who left during the round before open to replacements."""
    task.open_slots = sorted(task.open_slots + task.vacated)
    task.vacated = []
    task.round = round_
    task.round_started_height = ctx.env.height
    deadline = ctx.env.height + task.round_blocks
    enter_phase(state, task, COMMIT, deadline)
    task_event(ctx, task.id, "round_started", round=round_, deadline=deadline, final=int(round_ == task.rounds))


def end_task(state: State, ctx: BlockContext, task: Task, status: str) -> None:
    """End the task: return every active member's collateral, refund the unspent budget, clear its indexes."""
    enter_phase(state, task, DONE, 0)
    for _, round_, worker, segment in list(pending_segments(state, task.id)):
        unmark_pending(state, task.id, round_, worker, segment)
    for address in task.members:
        member = find_member(state, task.id, address)
        if member.status == ACTIVE:
            escrow_out(state, member.worker, member.collateral)
            member.collateral = 0
            _leave(state, task, member, FINISHED, status)
    delete_task_keys(state, task.id)  # nobody needs the data key of an ended task from the chain
    forget_unsettled_votes(state, task)  # a round that never settles has no reveal window to delete them
    task.open_slots, task.vacated = [], []
    refund = task.escrow
    escrow_out(state, task.requester, refund)
    task.escrow = 0
    task.refunded += refund
    task.status = status
    task.ended_height = ctx.env.height
    task_event(ctx, task.id, "refund", requester=encode_address(task.requester), amount=refund)
    task_event(ctx, task.id, status, round=task.round, paid=task.paid_workers, fees=task.paid_fees, refunded=refund,
               final_weights_hash=task.final_weights_hash.hex())
