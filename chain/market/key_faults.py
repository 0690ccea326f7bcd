"""Who bears what when a private task's data key is held, missing, late or bad (docs/privacy.md).

Collecting a key must cost collateral, and a requester must not be able to make an honest worker lose anything:
- a member holding its box (delivered, not reported bad) that leaves, or is dropped for a missed round, before
  the task ends forfeits its whole collateral (`holds_key`, applied in `lifecycle`): the data it read is the
  price. Public tasks keep the missed-round penalty.
- a member whose box did not come by `key_delivery_blocks` after the start of the first round it was due to
  train, and which did not commit that round, is released without penalty and compensated (`key_late`); so is
  one whose box is proven bad (`MsgReportBadKey`). The compensation (`key_compensation`, what a missed round
  would have cost it) comes out of the requester's escrow, which a private task's budget must cover for every
  member it may have (`key_reserve`).
- a validator owes no vote on a task whose box it never got in time or proved bad, and a segment that could
  not be decided because its committee's members with a usable key hold under two thirds of its power is paid
  as if it passed (`undecidable_for_want_of_keys`): the requester's fault, the requester's pay. Such a round
  still stays out of the next weights, as any unverified round does.
"""

from __future__ import annotations

from ..state import State
from .data_keys import drawn_height, find_key_box, note_drawn
from .economics import fee_of
from .power import operator_power
from .records import UNDECIDED, UNVERIFIED, Commitment, Member, Task
from .store import round_commitments
from .tally import has_two_thirds

MEMBERS_PER_SLOT = 2
"""A task has `workers_wanted` opening members and takes at most `workers_wanted` replacements over its life,
so at most 2 x `workers_wanted` members can be owed compensation."""


def key_compensation(collateral: int, missed_round_penalty_bps: int) -> int:
    """What the requester pays a member it failed to key: the missed-round penalty it spared it."""
    return fee_of(collateral, missed_round_penalty_bps)


def key_reserve(workers: int, collateral: int, missed_round_penalty_bps: int) -> int:
    """The part of a private task's budget that covers every compensation it may owe."""
    return MEMBERS_PER_SLOT * workers * key_compensation(collateral, missed_round_penalty_bps)


def holds_key(state: State, task: Task, worker: bytes) -> bool:
    """Whether `worker` was delivered the private task's key and did not prove its box bad."""
    if not task.private_data:
        return False
    box = find_key_box(state, task.id, worker)
    return box is not None and not box.reported_height


def key_late(state: State, task: Task, member: Member) -> bool:
    """For a member due in the current round: whether its key was missing at the round's key deadline (its
    start + `key_delivery_blocks`). A box delivered before the round started (in an earlier round, or while a
    replacement waited for its first round) is on time."""
    if not task.private_data:
        return False
    box = find_key_box(state, task.id, member.worker)
    deadline = task.round_started_height + task.terms["key_delivery_blocks"]
    return box is None or box.delivered_height > deadline


def usable_key(state: State, task: Task, operator: bytes) -> bool:
    """Whether a drawn validator got its box within `key_delivery_blocks` of its first draw and did not prove
    it bad."""
    box = find_key_box(state, task.id, operator)
    drawn = drawn_height(state, task.id, operator)
    return (box is not None and not box.reported_height and drawn is not None
            and box.delivered_height <= drawn + task.terms["key_delivery_blocks"])


def undecidable_for_want_of_keys(state: State, task: Task, commitment: Commitment) -> bool:
    """An unverified commitment of a private task with an undecided segment whose committee's members with a
    usable key hold under two thirds of its power: no vote could have decided it, through the requester's fault."""
    if not task.private_data or commitment.outcome != UNVERIFIED:
        return False
    for decision, committee in zip(commitment.decisions, commitment.committees):
        if decision != UNDECIDED:
            continue
        members = [bytes.fromhex(member) for member in committee]
        total = sum(operator_power(state, member) for member in members)
        keyed = sum(operator_power(state, member) for member in members if usable_key(state, task, member))
        if total and not has_two_thirds(keyed, total):
            return True
    return False


def note_drawn_committees(state: State, task: Task, height: int) -> None:
    """Record every operator on a committee of the task's current round as drawn (from `height` if new), so the
    requester may deliver it a box (`messages.deliver_key`)."""
    for commitment in round_commitments(state, task, task.round):
        for committee in commitment.committees:
            for member in committee:
                note_drawn(state, task.id, bytes.fromhex(member), height)
