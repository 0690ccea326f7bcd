"""The market's state records: workers, tasks, members, commitments and verdict votes.

Each record is a dataclass stored as canonical JSON (sorted keys, integers only, bytes as lower-case hex), so
a Merkle proof of a record shows something a person can read. Records change only through the verbs in
`market.store`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..codec import FLOATLESS_TYPES, canonical_json, reject_floats

R = TypeVar("R")

# Task status: open (waiting for workers) -> running -> completed | cancelled | expired | abandoned.
OPEN, RUNNING, COMPLETED, CANCELLED, EXPIRED, ABANDONED = "open", "running", "completed", "cancelled", "expired", "abandoned"
LIVE_STATUSES = (OPEN, RUNNING)

# Task phase within a running task: commit -> sampling -> verify -> (next round's commit | final) -> done.
JOIN, COMMIT, SAMPLING, VERIFY, DONE = "join", "commit", "sampling", "verify", "done"

# Member status.
ACTIVE, DROPPED, SLASHED, FINISHED, LEFT = "active", "dropped", "slashed", "finished", "left"

# Commitment outcome.
PENDING, PASSED, FAILED, UNVERIFIED, DISAGREED = "pending", "passed", "failed", "unverified", "disagreed"

FINAL_REPORT_SEGMENT = 0
"""The one check of a final report, sampled for every reporting member: its reported final weights hash
against the W_R its committee derives."""

# Segment decision.
UNDECIDED, SEGMENT_PASS, SEGMENT_FAIL = "undecided", "pass", "fail"

# Verdict values, as in the protobuf enum and docs/protocol.md.
VERDICT_PASS, VERDICT_FAIL, VERDICT_UNAVAILABLE = 1, 2, 3
VERDICT_NAMES = {VERDICT_PASS: "pass", VERDICT_FAIL: "fail", VERDICT_UNAVAILABLE: "unavailable"}


@dataclass
class Worker:
    address: bytes
    stake: int
    blob_url: str
    hardware: dict
    registered_height: int
    tasks: list[int] = field(default_factory=list)
    """Open or running tasks the worker belongs to, ascending."""
    earned: int = 0
    slashed: int = 0
    penalized: int = 0
    relay: str = ""
    """The blob relay serving this worker (`urls.relay_worker_url`), '' when it serves `blob_url` itself."""


@dataclass
class Task:
    id: int
    requester: bytes
    spec_hash: bytes
    status: str
    phase: str
    rounds: int
    workers_wanted: int
    reward_per_round: int
    collateral: int
    samples_per_worker: int
    round_blocks: int
    budget: int
    escrow: int
    """What is left of the budget in escrow (collateral is accounted on the members)."""
    inner_steps: int
    batch_size: int
    checkpoint_every: int
    seed: int
    created_height: int
    join_deadline: int
    terms: dict
    """The params that concern this task, copied at submission: fees, penalties, delays."""
    round: int = 0
    phase_deadline: int = 0
    """The height of the task's pending schedule entry (0 when none)."""
    started_height: int = 0
    ended_height: int = 0
    members: list[bytes] = field(default_factory=list)
    """Workers in join order, replacements included (at most 2 x `workers_wanted`); an opening member's
    position here is its worker index, a replacement takes the index of the slot it fills (`Member.index`)."""
    active_members: int = 0
    paid_workers: int = 0
    paid_fees: int = 0
    refunded: int = 0
    round_start_hashes: list[bytes] = field(default_factory=list)
    """The agreed start_weights_hash of each closed round; after the final report, the last is W_R's hash."""
    final_weights_hash: bytes = b""
    sampling_seed: bytes = b""
    """The seed the current round's segments and committees were drawn from (escalations draw from it too)."""
    held_fees: int = 0
    """Verifier fees and FAIL voters' slash shares of settled rounds, held (outside `escrow`) until their reveal
    window closes."""
    reveals_due: list[list[int]] = field(default_factory=list)
    """[height, round] of each settled round whose reveal window closes at that height."""
    cancel_requested: int = 0
    """1 once the requester cancelled during a training round: that round is trained, verified and paid, then
    the task ends `cancelled` instead of starting the next round."""
    private_data: int = 0
    """1 when the task's dataset is private: its data key reaches members after the start and validators when
    drawn onto one of its committees, sealed to each (`market.data_keys`)."""
    data_key_hash: bytes = b""
    """A private task's commitment to its data key (`market.data_keys.data_key_hash`), used by no other task."""
    round_started_height: int = 0
    """The height at which the current round started (`lifecycle.start_round`): a member's data key is on time
    for the round when delivered by this height + `key_delivery_blocks` (`market.key_faults`)."""
    vacated: list[int] = field(default_factory=list)
    """Worker indexes whose member was dropped, slashed or left during the current round: their slots open when
    the next round starts (docs/protocol.md 4.1c)."""
    open_slots: list[int] = field(default_factory=list)
    """Worker indexes open to a replacement (`MsgJoinTask` on a running task), ascending."""
    replacements: int = 0
    """Members that joined the running task into an open slot (at most `workers_wanted` over its life)."""
    kernels: list[str] = field(default_factory=lambda: ["torch"])
    """The training kernels its spec allows (`spec.KERNELS`, `determinism.kernels`): a commitment's determinism
    profile must belong to one of them (`profiles.check_replayable`)."""


@dataclass
class Member:
    task_id: int
    worker: bytes
    index: int
    status: str
    collateral: int
    """Collateral still locked in escrow for this task."""
    joined_height: int
    first_round: int = 0
    """The first round the member trains: 0 for an opening member, the round after the one in which it
    joined for a replacement (it neither commits nor is dropped before it)."""
    paid: int = 0
    penalized: int = 0
    slashed: int = 0
    rounds_passed: int = 0
    samples_paid: int = 0
    compensated: int = 0
    """What the requester paid it for a data key that did not come in time or was proven bad
    (`lifecycle.release_member`)."""
    left_round: int = -1
    """The round in which the member was dropped, slashed or left (-1 while active)."""
    reason: str = ""
    leaving: int = 0
    """1 once the member asked to leave (`MsgLeaveTask`) with a commitment awaiting verification: it leaves when
    that round settles, slashed if the round failed it, else with its collateral in full (`lifecycle`)."""


@dataclass
class Commitment:
    task_id: int
    round: int
    worker: bytes
    update_hash: bytes
    samples_processed: int
    steps: int
    checkpoint_root: bytes
    num_checkpoints: int
    start_weights_hash: bytes
    determinism_profile: str
    height: int
    outcome: str = PENDING
    segments: list[int] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    """Per sampled segment (same order as `segments`): undecided, pass or fail."""
    paid: int = 0
    committees: list[list[str]] = field(default_factory=list)
    """Per sampled segment: the operator addresses (hex) of its verifying committee, in draw order."""
    escalated: list[int] = field(default_factory=list)
    """Per sampled segment: 1 once its committee is the whole validator set (the worker aside), decided by two
    thirds of that set's power: after its first committee dissented or fell short when the verification window
    closed, or from the draw when the committee already held every validator (`market.tally`)."""
    drawn: list[int] = field(default_factory=list)
    """Per sampled segment: how many of its committee's first members were drawn for it and had to agree (the
    rest joined when it went to the whole set); 0 when the draw already gave it to the whole set."""
    held_verifier_fee: int = 0
    """The verifier fee of this payout, held until the round's reveal window closes."""
    reveal_deadline: int = 0
    """Last height at which the round's voters may reveal their replay digests (0 before settlement)."""
    residual_hash: bytes = b""
    """sha256 of the worker's error-feedback residual after this round's update (docs/protocol.md 2a)."""
    held_slash_shares: dict[str, int] = field(default_factory=dict)
    """When this commitment failed and its worker was slashed: the FAIL voters' shares of the slash (operator hex
    -> utrl), held until the round's reveal window closes and paid only to those whose reveals check out."""


@dataclass
class KeyBox:
    """A private task's data key sealed to one recipient (`market.data_keys`), delivered once."""

    sealed: bytes
    """The X25519 sealed box (`data_keys.SEALED_KEY_BYTES`) that only the recipient's key opens."""
    delivered_height: int
    reported_height: int = 0
    """The height at which the recipient's report that the box is bad was accepted (0: none)."""


@dataclass
class Vote:
    verdict: int
    evidence_hash: bytes
    height: int
    replay_commitment: bytes = b""
    replay_digest: bytes = b""
    """The revealed digest (empty until revealed)."""
    cpu_replay: int = 0
    """1 when the segment was trained on a GPU the voter did not declare: it replayed the profile's CPU part and
    judged the result within the tolerance, so its digest is compared only with other such replays
    (`market.reveals`)."""


def _is_bytes(type_name: str) -> bool:
    return type_name == "bytes"


def _is_bytes_list(type_name: str) -> bool:
    return type_name == "list[bytes]"


_PLAIN, _HEX, _HEX_LIST = 0, 1, 2


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, int], ...]:
    """(name, how it is stored) of each field of a record class, in declaration order: bytes as hex, a list of
    bytes as a list of hex, anything else as itself. Worked out once per class: records are encoded and decoded
    tens of thousands of times in a busy block, and reading the dataclass fields each time cost most of it."""
    return tuple((f.name, _HEX if _is_bytes(f.type) else _HEX_LIST if _is_bytes_list(f.type) else _PLAIN)
                 for f in dataclasses.fields(cls))


@functools.cache
def _encoding_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The names of a record class's fields stored as hex, as a list of hex, and as themselves (`_field_kinds`)."""
    kinds = _field_kinds(cls)
    return tuple(tuple(name for name, k in kinds if k == kind) for kind in (_HEX, _HEX_LIST, _PLAIN))


def encode_record(record: Any) -> bytes:
    """The record as canonical JSON: its bytes fields as hex. Only the fields stored as themselves are checked
    for floats (hex is a string), each with a type test first: the commitments of a busy block are encoded here."""
    hex_names, hex_list_names, plain_names = _encoding_plan(type(record))
    out: dict[str, Any] = {name: getattr(record, name).hex() for name in hex_names}
    for name in hex_list_names:
        out[name] = [item.hex() for item in getattr(record, name)]
    for name in plain_names:
        value = out[name] = getattr(record, name)
        if type(value) not in FLOATLESS_TYPES:
            reject_floats(value)
    return canonical_json(out, floats_checked=True)


def decode_record(cls: type[R], raw: bytes) -> R:
    data = json.loads(raw)
    kwargs = {}
    for name, kind in _field_kinds(cls):
        if name not in data:
            continue
        value = data[name]
        if kind == _HEX:
            value = bytes.fromhex(value)
        elif kind == _HEX_LIST:
            value = [bytes.fromhex(item) for item in value]
        kwargs[name] = value
    return cls(**kwargs)
