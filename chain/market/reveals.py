"""Lazy verifiers found out: the replay commitment of a vote, its reveal, and the settlement of a round's
verifier fees once its reveal window closes (docs/protocol.md section 4.4b).

A vote carries replay_commitment = sha256(TAG || operator(20) || salt(32) || replay_digest(32)), where the
replay digest is something only a replay of the segment yields (the worker never publishes it). After the
round settles, each voter opens its commitment with `MsgRevealReplay`, within `reveal_window` blocks. When the
window closes, every sampled segment's majority digest is the revealed digest backed by the most current power
(ties: the smaller digest). A voter is lazy on a segment when it revealed nothing, or (unless it voted
UNAVAILABLE, which replays nothing) revealed another digest than the majority's. A lazy voter gets no share of
the verifier fee of that worker's payout (held since settlement; the others who decided it share it, or the
fee collector takes it when none is left) and `lazy_verifier_penalty` of its stake is burned, once per
segment: bonded stake first, then what it unbonded since its vote (unbonding before the reveal deadline does
not dodge the penalty). A FAIL voter's share of a slash is held the same way (`lifecycle.slash_member`): paid
when its reveals check out, burned when it is lazy, like the rest of a slash that nobody earned (not handed to
the other voters, so that a proposer gains nothing by leaving a fellow voter's reveal out of its blocks).
Binding the operator address into the commitment stops a validator from copying another's.
"""

from __future__ import annotations

import hashlib

from ..ante import FEE_COLLECTOR
from ..block import BlockContext
from ..crypto import encode_address
from ..state import State
from .economics import split_evenly
from .events import task_event
from .power import burn_validator_stake, operator_power
from .records import VERDICT_UNAVAILABLE, Commitment, Task, Vote
from .store import escrow_burn, escrow_out, put_commitment, round_commitments, segment_votes
from .tally import deciding_voters

COMMITMENT_TAG = b"trolly/replay-commitment/v1"
REVEAL = 5
"""The schedule kind of a round's reveal deadline (beside `store`'s phase kinds)."""


def replay_commitment(operator: bytes, salt: bytes, replay_digest: bytes) -> bytes:
    return hashlib.sha256(COMMITMENT_TAG + operator + salt + replay_digest).digest()


def majority_digest(state: State, votes: list) -> bytes:
    """The revealed digest with the most current power behind it (ties: the smaller digest); b"" when none.
    UNAVAILABLE votes replayed nothing, so their digests do not count."""
    backing: dict[bytes, int] = {}
    for validator, vote in votes:
        if vote.replay_digest and vote.verdict != VERDICT_UNAVAILABLE:
            backing[vote.replay_digest] = backing.get(vote.replay_digest, 0) + operator_power(state, validator)
    return min(backing, key=lambda digest: (-backing[digest], digest)) if backing else b""


def lazy_voters(state: State, commitment: Commitment, segment: int) -> list[tuple[bytes, Vote]]:
    """Voters on one segment (with their votes) whose reveal is missing or disagrees with the majority digest,
    ascending."""
    votes = segment_votes(state, commitment.task_id, commitment.round, commitment.worker, segment)
    majority = majority_digest(state, votes)
    return [(validator, vote) for validator, vote in votes
            if not vote.replay_digest or (vote.verdict != VERDICT_UNAVAILABLE and vote.replay_digest != majority)]


def settle_slash_shares(state: State, ctx: BlockContext, task: Task, commitment: Commitment,
                        lazy: set[bytes]) -> None:
    """Release the held slash shares of a failed commitment's FAIL voters: each voter that is not `lazy` is paid
    its own share, a lazy one's is burned."""
    worker = encode_address(commitment.worker)
    burned = 0
    for operator, share in sorted(commitment.held_slash_shares.items()):
        validator = bytes.fromhex(operator)
        if validator in lazy:
            burned += share
        else:
            escrow_out(state, validator, share)
        task_event(ctx, task.id, "slash_share_burned" if validator in lazy else "slash_share_paid",
                   round=commitment.round, worker=worker, validator=encode_address(validator), amount=share)
    escrow_burn(state, burned)
    task.held_fees -= sum(commitment.held_slash_shares.values())
    commitment.held_slash_shares = {}


def settle_reveals(state: State, ctx: BlockContext, task: Task, round_: int) -> None:
    """Close round `round_`'s reveal window: penalise lazy voters, pay the held verifier fees and slash shares
    to the others."""
    penalty = task.terms.get("lazy_verifier_penalty", 0)
    for commitment in round_commitments(state, task, round_):
        lazy: set[bytes] = set()
        for segment in commitment.segments:
            for validator, vote in lazy_voters(state, commitment, segment):
                lazy.add(validator)
                burned = burn_validator_stake(state, validator, penalty, since_height=vote.height)
                task_event(ctx, task.id, "lazy_verifier", round=round_, worker=encode_address(commitment.worker),
                           segment=segment, validator=encode_address(validator), penalty=burned)
        fee = commitment.held_verifier_fee
        if fee:
            earners = [v for v, _ in deciding_voters(state, commitment, want_pass=True) if v not in lazy]
            for verifier, share in split_evenly(fee, earners) or [(FEE_COLLECTOR, fee)]:
                escrow_out(state, verifier, share)
            task.held_fees -= fee
            commitment.held_verifier_fee = 0
        shares_held = bool(commitment.held_slash_shares)
        if shares_held:
            settle_slash_shares(state, ctx, task, commitment, lazy)
        if fee or shares_held:
            put_commitment(state, commitment)
    task.reveals_due = [entry for entry in task.reveals_due if entry[1] != round_]
    task_event(ctx, task.id, "reveals_closed", round=round_)
