"""What the market answers, as typed views: the one reading of `/market/...` every client shares.

The chain's market queries (`trolly.chain.market.queries`) answer JSON; each answer is read here, once, into
frozen dataclasses whose field names are its keys, checked on the way in (`market_answers.py`): a missing
field, a value of the wrong type, a status the client does not know raise `MarketAnswerError`. The wallet CLI,
the worker, the verifier and the localnet read the market only through these views, fetched by
`market_queries.py`, so they never disagree about what the chain says.

    /market/task/<id>               TaskOverview: a TaskSummary with its terms, members (TaskMember), and how
                                    many rounds it shows so far
    /market/task/<id>/round/<r>...  RoundPage: one round and a page of its commitments (Commitment), each with
                                    its sampled segments, their committees and the validators' votes (Vote)
    /market/tasks[/open]...         TaskPage: TaskSummary items and the id the next page starts after
    /market/spec/<id>               TaskSpecView
    /market/worker/<address>        WorkerView, with its WorkerRecord (Hardware) while registered, and Unbonding
    /market/verify/<address>        VerifyWork: the SampledSegment items a validator must verify
    /market/data_key/<id>/<address> DataKeyView: a private task's data key sealed to one recipient
    /market/key_recipients/<id>     KeyRecipients: who may be delivered a private task's key now (KeyRecipient)
    /market/replay_gpus             ReplayGpus: the GPUs each validator's verifier replays (ValidatorGpus)
    /market/params                  the chain's own `MarketParams`

Payments are fields, not objects of their own, as the chain answers them: what a member was paid, penalized
and slashed (TaskMember), a commitment's pay and held verifier fee (Commitment), the task's totals (TaskSummary).

The chain answers a task in bounded pieces (its overview, then each round a page of commitments at a time);
`market_queries.get_task` follows them and assembles the whole task as one TaskView, rounds and all (a
RoundView per round), which is what every client reads. TaskView is not itself an answer of the chain: its
`to_answer` is the whole document (what `task status -o json` prints).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

from trolly.chain.market.economics import fee_of
from trolly.chain.market.records import (ABANDONED, ACTIVE, CANCELLED, COMMIT, COMPLETED, DISAGREED, DONE, DROPPED,
                                         EXPIRED, FAILED, FINISHED, JOIN, LEFT, OPEN, PASSED, PENDING, RUNNING, SAMPLING,
                                         SEGMENT_FAIL, SEGMENT_PASS, SLASHED, UNDECIDED, UNVERIFIED, VERDICT_NAMES,
                                         VERIFY)
from trolly.chain.market.urls import relay_worker_url

from .errors import MarketAnswerError
from .market_answers import Address, Hash, one_of, parse_answer, plain


def fetch_url(blob_url: str, relay: str, worker: str) -> str:
    """The base URL a worker's blobs are fetched from: its relay's place for it when a relay serves it
    (docs/protocol.md 3a), else its own blob URL."""
    return relay_worker_url(relay, worker) if relay else blob_url


Committee = tuple[Address, ...]
"""The validators drawn to verify one sampled segment, in draw order."""


@dataclasses.dataclass(frozen=True)
class MarketView:
    """A view of one market answer: read from it with `from_answer`, written back as the same JSON by `to_answer`."""

    @classmethod
    def from_answer(cls, answer: Any, where: str = "") -> Self:
        """The view of `answer` (decoded JSON); raises MarketAnswerError naming what does not fit."""
        return parse_answer(cls, answer, where or cls.__name__)

    def to_answer(self) -> dict:
        """The JSON this view was read from (what `-o json` prints)."""
        return plain(self)


# ---- tasks -----------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TaskSummary(MarketView):
    """A task as the listing shows it: terms, status, progress and money."""

    id: int
    requester: Address
    spec_hash: Hash
    status: str = one_of(OPEN, RUNNING, COMPLETED, CANCELLED, EXPIRED, ABANDONED)
    phase: str = one_of(JOIN, COMMIT, SAMPLING, VERIFY, DONE)
    round: int
    """The current round (equal to `rounds` during the final report)."""
    rounds: int
    workers_wanted: int
    workers_joined: int
    """Members that ever joined, replacements included."""
    active_members: int
    reward_per_round: int
    collateral: int
    budget: int
    escrow_remaining: int
    paid_workers: int
    paid_fees: int
    refunded: int
    final_weights_hash: Hash
    open_slots: int
    """Slots of members who left, open to a replacement while the task runs (docs/protocol.md 4.1c)."""
    replacements: int


@dataclasses.dataclass(frozen=True)
class TaskPage(MarketView):
    """One page of the task listing."""

    tasks: tuple[TaskSummary, ...]
    next: int | None
    """The id the following page starts after; None on the last page."""


@dataclasses.dataclass(frozen=True)
class KeyHeld(MarketView):
    """When a member's data key box was delivered and reported bad (0: not)."""

    delivered_height: int
    reported_height: int


@dataclasses.dataclass(frozen=True)
class TaskMember(MarketView):
    """A worker's membership of a task: its index, standing and what it was paid."""

    worker: Address
    index: int
    """The worker index (join order; a replacement's is the slot it filled): what its batches are drawn for."""
    status: str = one_of(ACTIVE, DROPPED, SLASHED, LEFT, FINISHED)
    collateral: int
    paid: int
    penalized: int
    slashed: int
    rounds_passed: int
    samples_paid: int
    compensated: int
    """What the requester paid it for a data key that did not come in time or was proven bad."""
    first_round: int
    """The first round the member trains (0, or the round after a replacement joined)."""
    left_round: int
    reason: str
    """Why the member was dropped, slashed or left ('' while active)."""
    leaving: int
    """1 once the member asked to leave with a commitment awaiting verification: it leaves when that round
    settles."""
    blob_url: str
    relay: str
    """The blob relay serving the member ('' when it serves `blob_url` itself)."""
    data_key_box: KeyHeld
    """Its private task's data key box: when delivered and reported bad (0s for a public task)."""

    @property
    def holds_key(self) -> bool:
        """Delivered its private task's data key and did not prove it bad: leaving early forfeits its whole
        collateral (docs/privacy.md)."""
        return bool(self.data_key_box.delivered_height) and not self.data_key_box.reported_height

    @property
    def fetch_url(self) -> str:
        """Where the member's blobs are fetched from (`fetch_url`)."""
        return fetch_url(self.blob_url, self.relay, self.worker)


@dataclasses.dataclass(frozen=True)
class Vote(MarketView):
    """One validator's verdict on one sampled segment."""

    segment: int
    validator: Address
    verdict: str = one_of(*VERDICT_NAMES.values())
    evidence_hash: Hash
    height: int
    replay_commitment: Hash
    replay_digest: Hash
    """The revealed replay digest ('' until revealed)."""


@dataclasses.dataclass(frozen=True)
class Commitment(MarketView):
    """A worker's commitment of one round, its sampled segments and how they were decided."""

    worker: Address
    update_hash: Hash
    samples_processed: int
    steps: int
    checkpoint_root: Hash
    num_checkpoints: int
    start_weights_hash: Hash
    determinism_profile: str
    height: int
    residual_hash: Hash
    outcome: str = one_of(PENDING, PASSED, FAILED, UNVERIFIED, DISAGREED)
    segments: tuple[int, ...]
    """The sampled segments; `decisions`, `committees` and `escalated` are in the same order."""
    decisions: tuple[str, ...] = one_of(UNDECIDED, SEGMENT_PASS, SEGMENT_FAIL)
    paid: int
    verdicts: tuple[Vote, ...]
    verdicts_deleted: bool
    """True once the round's reveal window closed (or its task ended before it settled): the chain deleted its
    votes, so `verdicts` is empty; `decisions` and `outcome` say what they decided."""
    committees: tuple[Committee, ...]
    escalated: tuple[int, ...]
    """Per segment: 1 once the whole validator set decides it (two thirds of its power), 0 while its sampled
    committee does (only unanimously)."""
    drawn: tuple[int, ...]
    """Per segment: how many of its committee's first members were drawn and had to agree (0: the whole set from
    the draw)."""
    held_verifier_fee: int
    reveal_deadline: int


@dataclasses.dataclass(frozen=True)
class RoundView(MarketView):
    """One round of a task, whole: the start weights its members agreed on and its commitments."""

    round: int
    start_weights_hash: Hash
    """The agreed start weights W_r ('' until the round closed)."""
    final_report: bool
    commitments: tuple[Commitment, ...]
    """In join order (the worker index, replacements after the opening members)."""

    def commitment_of(self, worker: str) -> Commitment | None:
        return next((c for c in self.commitments if c.worker == worker), None)


@dataclasses.dataclass(frozen=True)
class RoundPage(MarketView):
    """One page of a round: the round's own fields and the commitments of some of its members."""

    round: int
    start_weights_hash: Hash
    final_report: bool
    commitments: tuple[Commitment, ...]
    next: int | None
    """The member position the following page starts after; None on the last page."""


@dataclasses.dataclass(frozen=True)
class TaskDetail(TaskSummary):
    """A task's terms, schedule and members: what its overview and its whole view share."""

    progress: str
    samples_per_worker: int
    round_blocks: int
    inner_steps: int
    batch_size: int
    checkpoint_every: int
    seed: int
    terms: dict[str, int]
    """The params that concern this task, copied when it was submitted."""
    created_height: int
    join_deadline: int
    started_height: int
    ended_height: int
    phase_deadline: int
    cancel_requested: bool
    private_data: bool
    data_key_hash: Hash
    """A private task's commitment to its data key (`trolly.chain.market.data_keys.data_key_hash`); '' if public."""
    members: tuple[TaskMember, ...]

    def member(self, worker: str) -> TaskMember | None:
        return next((m for m in self.members if m.worker == worker), None)

    def missed_round_penalty(self, collateral: int) -> int:
        """What a member with `collateral` locked loses when dropped for a missed round, or when it leaves a
        round it has not committed (docs/protocol.md 4.1c): the task's `missed_round_penalty_bps` of it."""
        return fee_of(collateral, self.terms["missed_round_penalty_bps"])

    def departure_penalty(self, member: TaskMember) -> int:
        """What `member` loses by leaving (or being dropped) now: its whole collateral once it holds the private
        task's data key, else the missed-round penalty (`trolly.chain.market.lifecycle.departure_penalty`)."""
        return member.collateral if member.holds_key else self.missed_round_penalty(member.collateral)


@dataclasses.dataclass(frozen=True)
class TaskOverview(TaskDetail):
    """What `/market/task/<id>` answers: the task without its rounds, whose numbers it gives."""

    recorded_rounds: int
    """The task shows rounds 0..recorded_rounds-1 (the final report's included); 0 before it started."""


@dataclasses.dataclass(frozen=True)
class TaskView(TaskDetail):
    """A whole task: its overview's fields and every round it shows, assembled by `market_queries.get_task`."""

    round_details: tuple[RoundView, ...]
    """Rounds 0..round once the task started (none before)."""

    def round_detail(self, round_index: int) -> RoundView | None:
        """Round `round_index`, found by its number (never by its place in the list)."""
        return next((d for d in self.round_details if d.round == round_index), None)


@dataclasses.dataclass(frozen=True)
class TaskSpecView(MarketView):
    """A task's spec exactly as submitted, and the hash the chain recorded for it."""

    task_id: int
    spec_hash: Hash
    spec: str

    @property
    def spec_bytes(self) -> bytes:
        return self.spec.encode("utf-8")


@dataclasses.dataclass(frozen=True)
class DataKeyView(MarketView):
    """A private task's data key sealed to one recipient (a member or a validator's operator): only the
    recipient's ed25519 key opens it (`trolly.compute.data.encryption.open_data_key`)."""

    task_id: int
    recipient: Address
    sealed_key: Hash
    delivered_height: int
    reported_height: int
    """The height its recipient's report that it is bad was accepted at (0: not reported)."""

    @property
    def sealed_bytes(self) -> bytes:
        return bytes.fromhex(self.sealed_key)


@dataclasses.dataclass(frozen=True)
class KeyRecipient(MarketView):
    """One who may be delivered a private task's data key now, and what it holds."""

    address: Address
    role: str = one_of("member", "validator")
    drawn_height: int
    """A validator's first draw onto one of the task's committees (0 for a member)."""
    delivered_height: int
    """When its box was delivered (0: not yet)."""
    reported_height: int


@dataclasses.dataclass(frozen=True)
class KeyRecipients(MarketView):
    """Who may be delivered a private task's data key now: its active members once it runs, and the validators
    drawn onto its committees (none for an open, ended or public task)."""

    task_id: int
    status: str = one_of(OPEN, RUNNING, COMPLETED, CANCELLED, EXPIRED, ABANDONED)
    data_key_hash: Hash
    recipients: tuple[KeyRecipient, ...]

    def undelivered(self) -> list[KeyRecipient]:
        return [recipient for recipient in self.recipients if not recipient.delivered_height]


# ---- workers ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Hardware(MarketView):
    """What a worker declared it trains on."""

    device: str
    samples_per_second: int
    memory_mb: int
    threads: int


@dataclasses.dataclass(frozen=True)
class Unbonding(MarketView):
    """Worker stake on its way back: `amount` utrl at `maturity_height`."""

    maturity_height: int
    amount: int


@dataclasses.dataclass(frozen=True)
class WorkerRecord(MarketView):
    """A registered worker's stake, hardware, blob URL (or relay), tasks and earnings."""

    stake: int
    blob_url: str
    relay: str
    """The blob relay serving the worker ('' when it serves `blob_url` itself)."""
    hardware: Hardware
    registered_height: int
    tasks: tuple[int, ...]
    """Open or running tasks the worker belongs to, ascending."""
    earned: int
    slashed: int
    penalized: int


@dataclasses.dataclass(frozen=True)
class WorkerView(MarketView):
    """A worker: registered (with its record) or only still unbonding."""

    address: Address
    registered: bool
    unbonding: tuple[Unbonding, ...]
    record: WorkerRecord | None = None
    """Present exactly when `registered`; the answer carries its fields beside the others."""

    @classmethod
    def from_answer(cls, answer: Any, where: str = "") -> WorkerView:
        where = where or cls.__name__
        view = parse_answer(cls, answer, where, skip=frozenset({"record"}))
        if not view.registered:
            return view
        return dataclasses.replace(view, record=WorkerRecord.from_answer(answer, where))

    def to_answer(self) -> dict:
        answer = {"address": self.address, "registered": self.registered, "unbonding": plain(self.unbonding)}
        return answer | (self.record.to_answer() if self.record is not None else {})


# ---- verification ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ValidatorGpus(MarketView):
    """The GPU profile parts one validator's verifier replays bit for bit (`MsgDeclareReplayGpus`)."""

    validator: Address
    """The validator's operator account."""
    gpus: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ReplayGpus(MarketView):
    """Every validator that declared GPUs: a GPU-trained commitment is verified only by those naming its GPU."""

    replayers: tuple[ValidatorGpus, ...]

    def replayed(self) -> set[str]:
        """Every GPU part some validator replays."""
        return {gpu for replayer in self.replayers for gpu in replayer.gpus}


@dataclasses.dataclass(frozen=True)
class SampledSegment(MarketView):
    """One sampled segment a validator must verify, with the commitment it belongs to."""

    task_id: int
    round: int
    worker: Address
    worker_index: int
    segment: int
    spec_hash: Hash
    update_hash: Hash
    checkpoint_root: Hash
    num_checkpoints: int
    steps: int
    samples_processed: int
    start_weights_hash: Hash
    determinism_profile: str
    residual_hash: Hash
    previous_residual_hash: Hash
    """The worker's residual of the round before ('' in round 0)."""
    blob_url: str
    relay: str
    deadline: int
    """The height at which the segment's verification window closes."""

    @property
    def fetch_url(self) -> str:
        """Where the worker's checkpoints are fetched from (`fetch_url`)."""
        return fetch_url(self.blob_url, self.relay, self.worker)


@dataclasses.dataclass(frozen=True)
class VerifyWork(MarketView):
    """The segments awaiting a validator's verdicts.

    Each entry is read on its own: one the client cannot read is set aside with the reason (in `unreadable`),
    so that a validator still votes on the others rather than on none."""

    validator: Address
    segments: tuple[SampledSegment, ...] = ()
    unreadable: tuple[str, ...] = ()
    """Why each entry that could not be read was set aside."""

    @classmethod
    def from_answer(cls, answer: Any, where: str = "") -> VerifyWork:
        where = where or cls.__name__
        view = parse_answer(cls, answer, where, skip=frozenset({"segments", "unreadable"}))
        entries = answer.get("segments")
        if not isinstance(entries, list):
            raise MarketAnswerError(f"{where}.segments: expected a list, got {type(entries).__name__}")
        segments, unreadable = [], []
        for i, entry in enumerate(entries):
            try:
                segments.append(SampledSegment.from_answer(entry, f"{where}.segments[{i}]"))
            except MarketAnswerError as error:
                unreadable.append(str(error))
        return dataclasses.replace(view, segments=tuple(segments), unreadable=tuple(unreadable))
