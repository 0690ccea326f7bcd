"""A round's life after its commit phase: close, sample, settle (docs/protocol.md 4).

close_round   (at the commit deadline, or the block in which the last active member committed)
              drops members that did not commit (a replacement only from its first round) and waits
              `sampling_delay` blocks;
sample_round  (sampling_delay blocks later) draws each worker's segments and committees from the seed (for
              round == rounds, the final report, one check per member);
settle_round  (when every worker is decided, or the verification window closes) slashes, pays, releases
              the members that asked to leave (`lifecycle.release_leavers`), records the verified start and
              starts the next round (after the final report: completes the task).

Start weights are derived, never voted on: every worker of round r commits the `start_weights_hash` it
started from, and the round's verifiers derive W_r themselves (from the spec and the updates they checked)
and FAIL every sampled segment of a member whose start is another, whatever the other members committed. So
a training round keeps every committed member; the chain records as round r's start the hash that the
members whose round PASSED started from (the most samples, then the smallest hash, should they differ),
which clients compare with, never adopt. The final report is verified the same way: each member's reported
final weights hash is one sampled check (`FINAL_REPORT_SEGMENT`) for a committee that derives W_R itself
from the last verified start and the last round's passed updates; a false one is slashed, and only a
verified hash becomes the task's `final_weights_hash` (`settle_final_report`).
"""

from __future__ import annotations

from .. import keys
from ..ante import FEE_COLLECTOR
from ..block import BlockContext
from ..crypto import encode_address
from ..state import State
from .economics import segment_count, split_round_pay
from .events import task_event
from .key_faults import undecidable_for_want_of_keys
from .lifecycle import end_task, miss_round, release_leavers, slash_member, start_round
from .records import ABANDONED, ACTIVE, CANCELLED, COMPLETED, DISAGREED, FAILED, PASSED, PENDING, SAMPLING, UNDECIDED
from .records import COMMIT, FINAL_REPORT_SEGMENT, UNVERIFIED, VERIFY, Commitment, Member, Task
from .power import powered_operators
from .reveals import REVEAL
from .replay_gpus import capable_candidates, gpu_part_of
from .sampling import draw_committee, sample_segments
from .store import enter_phase, escrow_out, find_member, get_worker, has_commitment, mark_pending
from .store import put_commitment, put_member, put_worker, round_commitments, shared_member, uncommitted
from .store import unmark_pending
from .tally import apply_decision, slash_voters, tally_segment


def agreed_hash(weights: dict[bytes, tuple[int, int]]) -> bytes:
    """The start weights hash with the most weight, then the most reporters, then the smallest value."""
    return min(weights, key=lambda h: (-weights[h][0], -weights[h][1], h))


def majority_start(state: State, task: Task, commitments: list[Commitment], *, final: bool = False) -> bytes:
    """The start weights hash backed by the most samples among `commitments` (b"" for none): samples processed
    in the round, or for the final report the samples each member was paid for over the task."""
    weights: dict[bytes, tuple[int, int]] = {}
    for commitment in commitments:
        weight = find_member(state, task.id, commitment.worker).samples_paid if final else commitment.samples_processed
        total, reporters = weights.get(commitment.start_weights_hash, (0, 0))
        weights[commitment.start_weights_hash] = (total + weight, reporters + 1)
    return agreed_hash(weights) if weights else b""


def close_when_all_committed(state: State, ctx: BlockContext, task: Task) -> bool:
    """In the commit phase: once every active member due this round (a replacement from its first round) has
    committed, close the round at the end of this block instead of waiting for its deadline; True when it did
    (the task changed and must be stored)."""
    if all_due_committed(state, ctx, task):
        enter_phase(state, task, COMMIT, ctx.env.height)
        return True
    return False


def all_due_committed(state: State, ctx: BlockContext, task: Task) -> bool:
    """Whether the task is in its commit phase and every active member due this round has committed. A member's
    commitment is looked up first and its record read (once per block: `shared_member`) only when it has none:
    run at every commitment, the check then costs a key lookup per member, not a decoded member and commitment
    each."""
    return task.phase == COMMIT and all(not due_this_round(shared_member(state, ctx, task.id, worker), task.round)
                                        for worker in uncommitted(state, task, task.round))


def due_this_round(member: Member, round_: int) -> bool:
    """Whether `member` owes a commitment in `round_`: active, and (a replacement) past its first round."""
    return member.status == ACTIVE and member.first_round <= round_


def close_round(state: State, ctx: BlockContext, task: Task) -> None:
    """Drop (or release) every member due this round that did not commit, then sample the round. A member with a
    commitment is not read: only an active member past its first round can commit (`MsgCommitRound`), and
    nothing takes a committed member out of the task before its round settles (one asking to leave goes then)."""
    committed = 0
    for worker in task.members:
        if has_commitment(state, task.id, task.round, worker):
            committed += 1
            continue
        member = find_member(state, task.id, worker)
        if due_this_round(member, task.round):  # a replacement is not due before its first round
            miss_round(state, ctx, task, member)  # dropped, or released when its data key came late

    task_event(ctx, task.id, "round_closed", round=task.round, committed=committed)
    if task.active_members == 0:
        end_task(state, ctx, task, ABANDONED)
    else:  # a final report is sampled and verified like a training round (one check per member)
        enter_phase(state, task, SAMPLING, ctx.env.height + task.terms["sampling_delay"])


def sample_round(state: State, ctx: BlockContext, task: Task) -> None:
    if not ctx.env.sampling_seed and task.terms.get("seed_from_extensions"):
        enter_phase(state, task, SAMPLING, ctx.env.height + 1)  # no proposer-built hash as seed: wait for one
        task_event(ctx, task.id, "sampling_deferred", round=task.round)
        return
    seed = ctx.env.sampling_seed or ctx.env.block_hash  # vote extensions' seed; the block hash without one
    task.sampling_seed = seed
    candidates = powered_operators(state)
    size = task.terms.get("committee_size", 1 << 16)
    for commitment in round_commitments(state, task, task.round):
        if commitment.outcome != PENDING:
            continue
        if task.round == task.rounds:
            commitment.segments = [FINAL_REPORT_SEGMENT]
        else:
            segments = segment_count(commitment.steps, task.checkpoint_every)
            commitment.segments = sample_segments(seed, task.id, task.round, commitment.worker, segments,
                                                  task.samples_per_worker)
        commitment.decisions = [UNDECIDED] * len(commitment.segments)
        commitment.committees, commitment.escalated, commitment.drawn = [], [], []
        for segment in commitment.segments:
            committee, whole = draw_segment_committee(state, task, commitment, segment, candidates, size)
            commitment.committees.append([member.hex() for member in committee])
            commitment.escalated.append(int(whole))
            commitment.drawn.append(0 if whole else len(committee))
        put_commitment(state, commitment)
        for segment in commitment.segments:
            mark_pending(state, task.id, task.round, commitment.worker, segment)
        task_event(ctx, task.id, "segments_sampled", round=task.round, worker=encode_address(commitment.worker),
                   segments=",".join(str(s) for s in commitment.segments), seed=seed.hex())
    enter_phase(state, task, VERIFY, ctx.env.height + task.terms["verification_window"])


def whole_set(candidates: list[tuple[bytes, int]], commitment: Commitment) -> list[tuple[bytes, int]]:
    """The validators that may judge the commitment's segments at the whole-set level: all with power, its
    worker aside."""
    return [(operator, power) for operator, power in candidates if operator != commitment.worker]


def draw_segment_committee(state: State, task: Task, commitment: Commitment, segment: int,
                           candidates: list[tuple[bytes, int]], size: int) -> tuple[list[bytes], bool]:
    """(committee, whether it is the whole set) of one sampled segment. A CPU profile's k members are drawn from
    every validator; a GPU profile's from the validators that declared its GPU, drawn on until they hold more
    than a third of the power (`market.profiles`: then a coalition under a third cannot fill it). A GPU whose
    replayers no longer hold that much goes to the whole set at once, and so does a committee that holds every
    validator already."""
    everyone = whole_set(candidates, commitment)
    eligible = capable_candidates(state, everyone, commitment.determinism_profile)
    total = sum(power for _, power in candidates)
    floor = total if gpu_part_of(commitment.determinism_profile) is not None else 0
    committee = draw_committee(task.sampling_seed, task.id, task.round, commitment.worker, segment, 0, eligible,
                               size, beyond_third_of=floor)
    drawn = {operator: power for operator, power in eligible if operator in committee}
    if (floor and 3 * sum(drawn.values()) <= total) or len(committee) == len(everyone):
        return [*committee, *(operator for operator, _ in everyone if operator not in drawn)], True
    return committee, False


def escalate_to_whole_set(state: State, ctx: BlockContext, task: Task, commitments: list[Commitment]) -> bool:
    """At the verification window's close, send every segment still undecided by its sampled committee (a
    dissent, or too few votes) to the whole validator set, the worker aside: its committee's votes stand, every
    other validator joins it, and a fresh window starts; True when any was escalated. A segment escalates once:
    the whole set still undecided at the next close leaves the worker unverified."""
    everyone = None  # read once a commitment needs it: at most settlements nothing is left to escalate
    escalated = False
    for commitment in commitments:
        if commitment.outcome != PENDING:
            continue
        everyone = powered_operators(state) if everyone is None else everyone
        members = [operator for operator, _ in whole_set(everyone, commitment)]
        for index, segment in enumerate(commitment.segments):
            if commitment.decisions[index] != UNDECIDED or commitment.escalated[index]:
                continue
            current = commitment.committees[index]
            commitment.committees[index] = current + [m.hex() for m in members if m.hex() not in current]
            commitment.escalated[index] = 1
            escalated = True
            task_event(ctx, task.id, "committee_escalated", round=task.round, worker=encode_address(commitment.worker),
                       segment=segment, size=len(commitment.committees[index]))
            put_commitment(state, commitment)
    if escalated:
        enter_phase(state, task, VERIFY, ctx.env.height + task.terms["verification_window"])
    return escalated


def hold_reveals(state: State, task: Task, commitments: list[Commitment], height: int) -> None:
    """Open the round's reveal window: its voters reveal their replay digests until `height`."""
    if not any(c.segments for c in commitments):
        return
    for commitment in commitments:
        commitment.reveal_deadline = height
        put_commitment(state, commitment)
    state.set(keys.market_schedule_key(height, task.id, REVEAL), b"")
    task.reveals_due.append([height, task.round])


def settle_round(state: State, ctx: BlockContext, task: Task) -> None:
    commitments = [c for c in round_commitments(state, task, task.round) if c.outcome != DISAGREED]
    if task.round == task.rounds:
        settle_final_report(state, ctx, task, commitments)
        return
    for commitment in commitments:
        if commitment.outcome == PENDING:
            retally(state, commitment)
    if escalate_to_whole_set(state, ctx, task, commitments):
        return
    decide_unsettled(state, ctx, task, commitments)
    shares = [(c.worker, c.samples_processed,
               c.outcome == PASSED or undecidable_for_want_of_keys(state, task, c)) for c in commitments]
    payouts = split_round_pay(task.reward_per_round, shares, task.terms["validator_fee_bps"],
                              task.terms["verifier_fee_bps"])
    by_worker = {c.worker: c for c in commitments}
    for payout in payouts:
        commitment = by_worker[payout.worker]
        commitment.held_verifier_fee = payout.verifier_fee  # paid when the reveal window closes (market.reveals)
        task.held_fees += payout.verifier_fee
        pay_worker(state, ctx, task, commitment, payout.pay)
        escrow_out(state, FEE_COLLECTOR, payout.validator_fee)
        task.escrow -= payout.pay + payout.validator_fee + payout.verifier_fee
        task.paid_fees += payout.validator_fee + payout.verifier_fee
        task_event(ctx, task.id, "payout", round=task.round, worker=encode_address(payout.worker), amount=payout.pay,
                   validator_fee=payout.validator_fee, verifier_fee=payout.verifier_fee)
    verified_start = majority_start(state, task, [c for c in commitments if c.outcome == PASSED])
    task.round_start_hashes.append(verified_start)  # b"" when no member's round passed
    outcomes = {outcome: sum(1 for c in commitments if c.outcome == outcome) for outcome in (PASSED, FAILED, UNVERIFIED)}
    task_event(ctx, task.id, "round_settled", round=task.round, start_weights_hash=verified_start.hex(), **outcomes)
    hold_reveals(state, task, commitments, ctx.env.height + task.terms.get("reveal_window", 1))
    release_leavers(state, ctx, task)

    if task.active_members == 0:
        end_task(state, ctx, task, ABANDONED)
    elif task.cancel_requested:
        end_task(state, ctx, task, CANCELLED)  # cancelled mid-round: that round is settled, no other starts
    else:
        start_round(state, ctx, task, task.round + 1)


def decide_unsettled(state: State, ctx: BlockContext, task: Task, commitments: list[Commitment]) -> None:
    """At settlement: a commitment still undecided is `unverified` (its open segments no longer pending), and
    the member of a failed one is slashed (its FAIL voters' shares held until the reveals, `slash_member`)."""
    for commitment in commitments:
        if commitment.outcome == PENDING:
            retally(state, commitment)  # powers may have changed since the last vote
        if commitment.outcome == PENDING:
            commitment.outcome = UNVERIFIED
            for segment, decision in zip(commitment.segments, commitment.decisions):
                if decision == UNDECIDED:
                    unmark_pending(state, task.id, task.round, commitment.worker, segment)
            put_commitment(state, commitment)
        elif commitment.outcome == FAILED:
            member = find_member(state, task.id, commitment.worker)
            if member.status == ACTIVE:
                slash_member(state, ctx, task, member, commitment, slash_voters(state, commitment))


def settle_final_report(state: State, ctx: BlockContext, task: Task, commitments: list[Commitment]) -> None:
    """The final report's verdicts decided: a member whose reported final weights its committee found false is
    slashed like a failed segment; only a hash that verification passed becomes the task's
    `final_weights_hash` (weighted by the samples each reporter was paid for, should two pass); the task then
    completes (the unspent budget refunded, the collateral of the members left returned), or ends abandoned
    when no member is left. A final report earns no round pay."""
    decide_unsettled(state, ctx, task, commitments)
    verified = majority_start(state, task, [c for c in commitments if c.outcome == PASSED], final=True)
    task.round_start_hashes.append(verified)
    task.final_weights_hash = verified
    outcomes = {outcome: sum(1 for c in commitments if c.outcome == outcome) for outcome in (PASSED, FAILED, UNVERIFIED)}
    task_event(ctx, task.id, "round_settled", round=task.round, start_weights_hash=verified.hex(), **outcomes)
    hold_reveals(state, task, commitments, ctx.env.height + task.terms.get("reveal_window", 1))
    end_task(state, ctx, task, ABANDONED if task.active_members == 0 else COMPLETED)


def pay_worker(state: State, ctx: BlockContext, task: Task, commitment: Commitment, pay: int) -> None:
    escrow_out(state, commitment.worker, pay)
    commitment.paid = pay
    put_commitment(state, commitment)
    member = find_member(state, task.id, commitment.worker)
    member.paid += pay
    member.rounds_passed += 1
    member.samples_paid += commitment.samples_processed
    put_member(state, member)
    worker = get_worker(state, commitment.worker)
    worker.earned += pay
    put_worker(state, worker)
    task.paid_workers += pay


def retally(state: State, commitment: Commitment) -> None:
    """At the verification window's close, tally the commitment's undecided segments once more with the current
    powers (a validator that left since the last vote no longer counts in the total) and the closing rule (a
    unanimous committee whose voters hold two thirds of it decides, `tally.tally_segment`)."""
    changed = False
    for segment, decision in list(zip(commitment.segments, commitment.decisions)):
        if decision != UNDECIDED or commitment.outcome != PENDING:
            continue
        decided = tally_segment(state, commitment, segment, closing=True)
        if decided != UNDECIDED:
            apply_decision(state, commitment, segment, decided)
            changed = True
    if changed:  # else it is stored as it is: the same bytes again would change nothing, at a busy block's cost
        put_commitment(state, commitment)
