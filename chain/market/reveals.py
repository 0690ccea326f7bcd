"""Lazy verifiers found out, and losing verdicts paid for: the replay commitment of a vote, its reveal, and the
settlement of a round's verifier fees and penalties once its reveal window closes (docs/protocol.md 4.4b).

A vote carries replay_commitment = sha256(TAG || operator(20) || salt(32) || replay_digest(32)), where the
replay digest is something only a replay of the segment yields (the worker never publishes it). After the
round settles, each voter opens its commitment with `MsgRevealReplay`, within `reveal_window` blocks. When the
window closes, a sampled segment's true replay digest is the revealed digest backed by two thirds of the power
of the body that decided it (its unanimous committee, or the whole validator set when it escalated): no set
under a third of the power can define it, and when no digest has that backing there is none. Digests of the
two kinds of replay are never compared with each other: a GPU-trained segment replayed on its GPU (bit for bit)
and one replayed on a CPU (`Vote.cpu_replay`, judged within a tolerance) each have their own.

A voter is lazy on a segment when it revealed nothing, or (unless it voted UNAVAILABLE, which replays nothing)
revealed another digest than its kind's true one; a validator drawn onto the committee of a GPU segment, which
it sits on only because it declared that GPU, is lazy when it cast no vote the segment needed
(`absent_replayers`). A lazy validator gets no share of the verifier fee of that worker's payout (held since
settlement; the others who decided it share it, or the fee collector takes it when none is left) and
`lazy_verifier_penalty` of its stake is burned, once per segment: bonded stake first, then what it unbonded
since its vote (unbonding before the reveal deadline does not dodge the penalty). A FAIL voter's share of a
slash is held the same way (`lifecycle.slash_member`): paid when its reveals check out, burned when it is lazy,
like the rest of a slash that nobody earned (not handed to the other voters, so that a proposer gains nothing
by leaving a fellow voter's reveal out of its blocks). A PASS or FAIL voter on the losing side of a segment
the whole set decided (`tally.losing_voters`) loses `losing_verdict_penalty_bps` of its stake, and at least
`lazy_verifier_penalty` (a validator of the smallest stake must not summon the whole set for a pittance), the
same way.
Binding the operator address into the commitment stops a validator from copying another's.
"""

from __future__ import annotations

import hashlib

from ..ante import FEE_COLLECTOR
from ..block import BlockContext
from ..crypto import encode_address
from ..slash import slash_validator
from ..state import State
from .economics import split_evenly
from .events import task_event
from .power import power_reader, stake_share
from .records import FAILED, UNDECIDED, VERDICT_NAMES, VERDICT_UNAVAILABLE, Commitment, Task, Vote
from .replay_gpus import gpu_part_of
from .store import escrow_burn, escrow_out, put_commitment, round_commitments
from .tally import committee_of, committee_votes, deciding_voters, has_two_thirds, losing_voters
from .vote_pruning import delete_read_votes

COMMITMENT_TAG = b"trolly/replay-commitment/v1"
REVEAL = 5
"""The schedule kind of a round's reveal deadline (beside `store`'s phase kinds)."""


def replay_commitment(operator: bytes, salt: bytes, replay_digest: bytes) -> bytes:
    return hashlib.sha256(COMMITMENT_TAG + operator + salt + replay_digest).digest()


def true_digests(state: State, commitment: Commitment, segment: int, votes: list[tuple[bytes, Vote]],
                 ctx: BlockContext | None = None) -> dict[int, bytes]:
    """Per kind of replay (`Vote.cpu_replay`), the revealed digest backed by two thirds of the power of the
    segment's deciding body (its committee: the sampled one, or the whole set it escalated to); a kind without
    one is absent. UNAVAILABLE votes replayed nothing, so their digests do not count."""
    power = power_reader(state, ctx)
    total = sum(power(member) for member in committee_of(commitment, segment))
    backing: dict[tuple[int, bytes], int] = {}
    for validator, vote in votes:
        if vote.replay_digest and vote.verdict != VERDICT_UNAVAILABLE:
            key = (vote.cpu_replay, vote.replay_digest)
            backing[key] = backing.get(key, 0) + power(validator)
    return {kind: digest for (kind, digest), power in sorted(backing.items()) if has_two_thirds(power, total)}


def lazy_voters(state: State, commitment: Commitment, segment: int, votes: list[tuple[bytes, Vote]],
                ctx: BlockContext | None = None) -> list[tuple[bytes, Vote]]:
    """Voters on one segment (with their votes: `votes`, every vote on it) whose reveal is missing or disagrees
    with their kind's true digest, ascending. With `ctx`, powers are read shared (`power.power_reader`)."""
    true = true_digests(state, commitment, segment, votes, ctx)
    return [(validator, vote) for validator, vote in votes
            if not vote.replay_digest or (vote.verdict != VERDICT_UNAVAILABLE and vote.cpu_replay in true
                                          and vote.replay_digest != true[vote.cpu_replay])]


def absent_replayers(commitment: Commitment, segment: int, votes: list[tuple[bytes, Vote]]) -> list[bytes]:
    """The drawn members of a GPU segment's sampled committee (validators that declared its GPU) that did not vote
    on it (`votes`: every vote on it) although it needed them: it was decided, or escalated, rather than left open
    by another segment's fail."""
    index = commitment.segments.index(segment)
    if gpu_part_of(commitment.determinism_profile) is None or not commitment.drawn[index:index + 1]:
        return []
    if commitment.decisions[index] == UNDECIDED and commitment.outcome == FAILED and not commitment.escalated[index]:
        return []  # another segment failed the round first: this one no longer needed its votes
    voted = {validator for validator, _ in votes}
    drawn = commitment.committees[index][:commitment.drawn[index]]
    return [member for member in map(bytes.fromhex, drawn) if member not in voted]


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


def penalize_segment(state: State, ctx: BlockContext, task: Task, commitment: Commitment, segment: int,
                     votes: list[tuple[bytes, Vote]]) -> set[bytes]:
    """Burn the penalties of one segment's lazy, absent and losing voters (from `votes`, every vote on it);
    returns the lazy and absent ones."""
    penalty = task.terms.get("lazy_verifier_penalty", 0)
    worker = encode_address(commitment.worker)
    lazy: set[bytes] = set()
    for validator, vote in lazy_voters(state, commitment, segment, votes, ctx):
        lazy.add(validator)
        burned = slash_validator(state, ctx, validator, vote.height, "lazy_verifier", amount=penalty).total
        task_event(ctx, task.id, "lazy_verifier", round=commitment.round, worker=worker, segment=segment,
                   validator=encode_address(validator), penalty=burned)
    for validator in absent_replayers(commitment, segment, votes):
        lazy.add(validator)
        burned = slash_validator(state, ctx, validator, commitment.height, "absent_verifier", amount=penalty).total
        task_event(ctx, task.id, "absent_verifier", round=commitment.round, worker=worker, segment=segment,
                   validator=encode_address(validator), penalty=burned)
    bps = task.terms.get("losing_verdict_penalty_bps", 0)
    for validator, vote in losing_voters(commitment, segment, votes):
        owed = max(penalty, stake_share(state, validator, bps, vote.height))
        burned = slash_validator(state, ctx, validator, vote.height, "losing_verdict", amount=owed).total
        task_event(ctx, task.id, "losing_verdict", round=commitment.round, worker=worker, segment=segment,
                   validator=encode_address(validator), verdict=VERDICT_NAMES[vote.verdict], penalty=burned)
    return lazy


def settle_reveals(state: State, ctx: BlockContext, task: Task, round_: int) -> None:
    """Close round `round_`'s reveal window: penalise lazy, absent and losing voters, pay the held verifier fees
    and slash shares to the others, then delete the round's votes, which nothing reads after this
    (`vote_pruning`). Each segment's votes are read once, by key (`tally.committee_votes`), for all of it."""
    for commitment in round_commitments(state, task, round_):
        votes = {segment: committee_votes(state, commitment, segment) for segment in commitment.segments}
        lazy: set[bytes] = set()
        for segment in commitment.segments:
            lazy |= penalize_segment(state, ctx, task, commitment, segment, votes[segment])
        fee = commitment.held_verifier_fee
        if fee:
            earners = [v for v, _ in deciding_voters(state, commitment, want_pass=True, votes=votes, ctx=ctx) if v not in lazy]
            for verifier, share in split_evenly(fee, earners) or [(FEE_COLLECTOR, fee)]:
                escrow_out(state, verifier, share)
            task.held_fees -= fee
            commitment.held_verifier_fee = 0
        shares_held = bool(commitment.held_slash_shares)
        if shares_held:
            settle_slash_shares(state, ctx, task, commitment, lazy)
        if fee or shares_held:
            put_commitment(state, commitment)
        delete_read_votes(state, commitment, votes)
    task.reveals_due = [entry for entry in task.reveals_due if entry[1] != round_]
    task_event(ctx, task.id, "reveals_closed", round=round_)
