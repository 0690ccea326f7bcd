"""Errors of the task market (codespace "market"); every one leaves state unchanged.

Clients match on the codes, so they are stable. Codes 1..15 mirror the generic meanings of
`trolly.chain.errors` where one fits; market-specific conditions start at 20.
"""

from __future__ import annotations

from ..errors import ChainError


class MarketError(ChainError):
    """A market message was refused."""

    code = 1
    codespace = "market"


class NotValidator(MarketError):
    """Only the operator account of an active validator may submit verdicts."""

    code = 10


class TaskNotFound(MarketError):
    """No task has this id."""

    code = 11


class InvalidSpec(MarketError):
    """The task spec is not valid JSON against the spec schema, or disagrees with the message."""

    code = 20


class SpecTooLarge(MarketError):
    """The task spec is larger than `max_spec_bytes`."""

    code = 21


class BudgetTooLow(MarketError):
    """The budget does not cover rounds x (reward per round + validator and verifier fees)."""

    code = 22


class CollateralTooLow(MarketError):
    """The collateral is below the minimum that keeps a worker honest (see `market.params`)."""

    code = 23


class InvalidTerms(MarketError):
    """A task term (workers, rounds, deadlines, samples) is outside the chain's limits."""

    code = 24


class WorkerNotRegistered(MarketError):
    """The signer (or named worker) is not a registered worker."""

    code = 25


class WorkerAlreadyRegistered(MarketError):
    """The signer is already a registered worker."""

    code = 26


class WorkerBusy(MarketError):
    """The worker still belongs to an open or running task."""

    code = 27


class StakeTooLow(MarketError):
    """The worker stake is below `min_worker_stake`."""

    code = 28


class TaskNotOpen(MarketError):
    """The task is not accepting workers (already full, started or ended)."""

    code = 29


class AlreadyMember(MarketError):
    """The worker already joined this task."""

    code = 30


class NotMember(MarketError):
    """The signer is not an active member of this task."""

    code = 31


class RoundClosed(MarketError):
    """The round is not the task's current round, or its commit phase is over."""

    code = 32


class AlreadyCommitted(MarketError):
    """The member already committed for this round."""

    code = 33


class InvalidCommitment(MarketError):
    """A commitment field is malformed or inconsistent with the task spec."""

    code = 34


class NotSampled(MarketError):
    """The segment is not awaiting verdicts (not sampled, already decided, or the window closed)."""

    code = 35


class DuplicateVerdict(MarketError):
    """This validator already voted on this segment."""

    code = 36


class NotRequester(MarketError):
    """Only the task's requester may cancel it."""

    code = 37


class TaskEnded(MarketError):
    """The task already ended."""

    code = 38


class InvalidVerdict(MarketError):
    """The verdict message is malformed."""

    code = 39


class InvalidWorkerProfile(MarketError):
    """The worker's hardware profile or blob URL is malformed."""

    code = 40


class SelfVerdict(MarketError):
    """A validator may not judge its own operator account's work."""

    code = 41


class InvalidBlobUrl(InvalidWorkerProfile):
    """The worker's blob URL is not a plain http(s) base URL (`trolly.chain.market.urls`): scheme, host, port,
    no user information, bounded length, printable ASCII."""

    code = 42


# Codes 50.. belong to verification hardening (issue 19 items 3, 4, 5, 8).
class ModelTooLarge(MarketError):
    """The spec's model, batch or memory estimate exceeds the market's limits (`chain/market/footprint.py`)."""

    code = 50


class CancelPending(MarketError):
    """The task is already cancelled; it ends once the round whose commitments are on chain settles."""

    code = 51


class NotOnCommittee(MarketError):
    """The validator does not sit on the committee drawn for this segment."""

    code = 52


class InvalidReveal(MarketError):
    """A reveal does not open the vote's replay commitment, comes outside the reveal phase, or has no vote."""

    code = 53


# Codes 60.. belong to bounded memory (issue 24 item 5).
class DatasetTooLarge(MarketError):
    """The spec declares more dataset shards or bytes than the market allows (`max_dataset_shards`,
    `max_dataset_bytes`)."""

    code = 60


class NotKeyRecipient(MarketError):
    """A data key may be delivered only to a member of the task or to a validator's operator."""

    code = 61


class InvalidReplayGpus(MarketError):
    """A validator's list of the GPUs its verifier replays is malformed: too many, too long, not a GPU profile
    part, or one named twice."""

    code = 62


# Codes 70.. belong to members leaving a task (issue 28 item 3).
class LeavePending(MarketError):
    """The member already asked to leave; it leaves when the round its commitment is in settles."""

    code = 70


# Codes 80.. belong to verdicts that no minority decides (issue 32 item 1).
class UnknownProfile(MarketError):
    """A commitment's determinism profile is not one the chain knows: neither a CPU profile of a replayable
    instruction set nor one naming a GPU some validator declared (`market.profiles`)."""

    code = 80


class TooFewReplayers(MarketError):
    """A commitment names a GPU whose declared replayers (the worker aside) hold no more than a third of the
    validators' power: a coalition under a third could be all of them, so no work on it is accepted yet."""

    code = 81


class ProfileNotAllowed(MarketError):
    """A commitment's determinism profile belongs to a kernel its task's spec does not allow
    (`determinism.kernels`: a `wasm32` profile in a task that allows only `torch`, or the reverse)."""

    code = 82


# Codes 90.. belong to private tasks' data keys (issue 32 items 2, 3, 6).
class InvalidDataKeyHash(MarketError):
    """A private task (its spec names a cipher) must commit to its data key with a 32-byte `data_key_hash`;
    a public one carries none."""

    code = 90


class DataKeyReused(MarketError):
    """An earlier task committed to this data key: every private task needs a key of its own."""

    code = 91


class TaskNotStarted(MarketError):
    """A member's data key is delivered once the task is running, never while it is open (leaving an open task
    returns the whole collateral, so a box then would cost its collector nothing)."""

    code = 92


class KeyAlreadyDelivered(MarketError):
    """This recipient already holds its box for the task: a box is delivered once."""

    code = 93


class NoKeyBox(MarketError):
    """The sender holds no data key box for this task, so it has nothing to report."""

    code = 94


class KeyBoxGood(MarketError):
    """The report's proof opens the box to the key the task committed to: the box is good."""

    code = 95


class KeyReportRefused(MarketError):
    """The box was already reported, or the member committed work this round (a box it could not open gave it
    nothing to train with): the report is refused."""

    code = 96
