"""The market as a chain `Module`: its messages, queries, params, end-block hook and invariants.

It lives beside the bank and staking modules, above both `chain/market/` (the market's records, verbs and
rules) and `chain/messages/` (one handler per message kind, which use those verbs): it names every handler, so
inside `chain/market/` it would make that folder and `chain/messages/` import each other."""

from __future__ import annotations

from .. import keys
from ..accounts import get_balance
from ..messages.cancel_task import process_cancel_task, validate_cancel_task
from ..messages.declare_replay_gpus import process_declare_replay_gpus, validate_declare_replay_gpus
from ..messages.deliver_key import process_deliver_key, validate_deliver_key
from ..messages.commit_round import process_commit_round, validate_commit_round
from ..messages.join_task import process_join_task, validate_join_task
from ..messages.leave_task import process_leave_task, validate_leave_task
from ..messages.report_bad_key import process_report_bad_key, validate_report_bad_key
from ..messages.reveal_replay import process_reveal_replay, validate_reveal_replay
from ..messages.register_worker import process_register_worker, validate_register_worker
from ..messages.submit_task import process_submit_task, validate_submit_task
from ..messages.submit_verdict import process_submit_verdict, validate_submit_verdict
from ..messages.unregister_worker import process_unregister_worker, validate_unregister_worker
from ..messages.update_worker import process_update_worker, validate_update_worker
from ..module import InvariantBroken, MessageRoute, Module
from ..proto import market_pb2 as pb
from ..state import State
from ..market.end_block import market_end_block
from ..market.params import MarketParams
from ..market.queries import QUERIES
from ..market.records import ACTIVE, LIVE_STATUSES
from ..market.reveals import REVEAL
from ..market.store import ESCROW, find_member, iterate_tasks, iterate_unbonding, iterate_workers, pending_segments
from ..market.store import phase_kind
from ..market.verify_work import pending_in_records


def check_escrow_balance(state: State) -> None:
    """The escrow account holds exactly the open task budgets, the locked collateral and the worker stakes."""
    budgets = collateral = 0
    for task in iterate_tasks(state):
        if task.held_fees < 0:
            raise InvariantBroken(f"task {task.id} holds negative verifier fees: {task.held_fees}")
        if task.status not in LIVE_STATUSES:
            if task.escrow != 0:
                raise InvariantBroken(f"ended task {task.id} still has {task.escrow} in escrow")
            budgets += task.held_fees
            continue
        if task.escrow < 0:
            raise InvariantBroken(f"task {task.id} escrow is negative: {task.escrow}")
        budgets += task.escrow + task.held_fees
        for address in task.members:
            member = find_member(state, task.id, address)
            if member.status == ACTIVE:
                collateral += member.collateral
            elif member.collateral != 0:
                raise InvariantBroken(f"member {address.hex()} of task {task.id} left with collateral locked")
    stakes = sum(worker.stake for worker in iterate_workers(state))
    unbonding = sum(amount for _, _, amount in iterate_unbonding(state))
    expected = budgets + collateral + stakes + unbonding
    if get_balance(state, ESCROW) != expected:
        raise InvariantBroken(f"market escrow holds {get_balance(state, ESCROW)}, records account for {expected} "
                              f"(budgets {budgets} + collateral {collateral} + stakes {stakes} + unbonding {unbonding})")


def check_schedule(state: State) -> None:
    """Every live task has exactly one phase entry, matching its phase deadline (ended tasks have none), plus one
    reveal entry per settled round whose reveal window is still open."""
    entries: dict[int, list[tuple[int, int]]] = {}
    for key, _ in state.iterate(keys.MARKET_SCHEDULE):
        height, task_id, kind = int.from_bytes(key[1:9], "big"), int.from_bytes(key[9:17], "big"), key[17]
        entries.setdefault(task_id, []).append((height, kind))
    for task in iterate_tasks(state):
        expected = [(task.phase_deadline, phase_kind(task.phase))] if task.status in LIVE_STATUSES else []
        expected += [(height, REVEAL) for height, _ in task.reveals_due]
        if sorted(entries.pop(task.id, [])) != sorted(expected):
            raise InvariantBroken(f"task {task.id} schedule entries disagree with its phase {task.phase}")
    if entries:
        raise InvariantBroken(f"schedule entries for unknown tasks {sorted(entries)}")


def check_pending_segments(state: State) -> None:
    """The segments awaiting verdicts, as the pending keys list them, are exactly those the records name
    (`verify_work.pending_in_records`): what lets `/market/verify` be answered, and proven, from the records."""
    named = [(task.id, task.round, commitment.worker, segment) for task, commitment, segment in pending_in_records(state)]
    if named != list(pending_segments(state)):
        raise InvariantBroken("the pending segments' keys disagree with the segments the task records leave pending")


MARKET = Module(
    name="market",
    messages=(
        MessageRoute(pb.MsgRegisterWorker, validate_register_worker, process_register_worker),
        MessageRoute(pb.MsgUpdateWorker, validate_update_worker, process_update_worker),
        MessageRoute(pb.MsgUnregisterWorker, validate_unregister_worker, process_unregister_worker),
        MessageRoute(pb.MsgSubmitTask, validate_submit_task, process_submit_task),
        MessageRoute(pb.MsgCancelTask, validate_cancel_task, process_cancel_task),
        MessageRoute(pb.MsgJoinTask, validate_join_task, process_join_task),
        MessageRoute(pb.MsgLeaveTask, validate_leave_task, process_leave_task),
        MessageRoute(pb.MsgDeliverKey, validate_deliver_key, process_deliver_key),
        MessageRoute(pb.MsgReportBadKey, validate_report_bad_key, process_report_bad_key),
        MessageRoute(pb.MsgCommitRound, validate_commit_round, process_commit_round),
        MessageRoute(pb.MsgSubmitVerdict, validate_submit_verdict, process_submit_verdict),
        MessageRoute(pb.MsgRevealReplay, validate_reveal_replay, process_reveal_replay),
        MessageRoute(pb.MsgDeclareReplayGpus, validate_declare_replay_gpus, process_declare_replay_gpus),
    ),
    queries=QUERIES,
    params=(MarketParams,),
    end_block=market_end_block,
    invariants=(check_escrow_balance, check_schedule, check_pending_segments),
)
