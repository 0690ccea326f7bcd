"""Replaying one sampled segment and judging it.

    claim  = SegmentClaim.from_segment(segment)         # a SampledSegment of /market/verify/<validator>
    report = await verify_segment(claim, spec, dataset, source, replayer)
    report.verdict                                      # VERDICT_PASS, VERDICT_FAIL or VERDICT_UNAVAILABLE

The steps, in order (each failure ends the check with its reason):

1. The commitment's own numbers (`claims.check_commitment`): checkpoint count, samples, segment index.
2. The worker's checkpoint listing must have `num_checkpoints` hashes whose Merkle root is the committed
   `checkpoint_root`; checkpoints i and i + 1 are fetched by hash (the blob client checks every byte).
   Nothing served, after retries: UNAVAILABLE ("unavailable"). Served but not what was committed (listing
   with another root, bytes with another hash): UNAVAILABLE as well ("tampered"), since the committed
   checkpoint was still not produced; the report says which.
3. Committed checkpoints whose declared tensors are not the spec model's (checked before decoding,
   `compute/model_layout.py`), that do not decode, sit at the wrong step, or (segment 0) do not hold the committed
   start weights with a fresh optimizer: FAIL. The start weights must also be the round's global weights
   when the caller knows them (`expected_start_hash`, from the aggregation check).
4. Replay with `train_segment` from checkpoint i and compare with checkpoint i + 1 byte for byte (for the
   round's last segment, the replay's step and weights, as that checkpoint holds no optimizer state; in the
   replay's own turn when checkpoint i + 1 is fetched by then, which it usually is), under the committed
   profile: its thread count here, another instruction set in a child process (`isa_child_replay.py`). A profile this
   verifier cannot replay exactly is a FAIL (`replay_profile.py`): only the instruction sets every verifier replays
   are accepted, so no worker can move itself onto a tolerance. A GPU profile this verifier's GPU does not match
   is replayed on its CPU part and judged within the tolerance (the whole set's check of a disputed GPU segment).
5. The update check, once per (worker, round) and shared by its sampled segments, those verified at the same
   time included (`update_check.py`): the committed update must be the codec's encoding of W_r - W_end plus the
   previous committed residual, and the committed residual what it leaves out. A mismatch turns this segment's
   PASS into FAIL (so every vote on that worker's round is FAIL); a blob it needs that is not served, into
   UNAVAILABLE.

The report carries the numbers behind the verdict; its canonical JSON is the evidence whose sha256 goes on
chain with the vote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from trolly.chain.crypto import decode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_NAMES, VERDICT_PASS, VERDICT_UNAVAILABLE
from trolly.compute.blobs.errors import BlobError, BlobHashMismatch, BlobNotFound
from trolly.compute.checkpoints import TrainingState, checkpoint_bytes, decode_checkpoint, final_state
from trolly.compute.codecs import get_codec
from trolly.compute.data.dataset import Dataset
from trolly.compute.errors import ComputeError
from trolly.compute.model_layout import model_layout
from trolly.compute.checkpoint_merkle import merkle_root
from trolly.compute.spec import TaskSpec
from trolly.compute.training import segment_bounds
from trolly.wallet.market_views import SampledSegment

from . import claims, evidence
from .blob_cache import VerifiedBlobs
from .replay_profile import ProfileRefused, Replayer, parse_profile  # noqa: F401  (Replayer, parse_profile: re-exported)
from .tolerance import BITWISE, Comparison, compare_states
from .update_check import UpdateChecks, UpdateVerdict, judge_update

PASSED, FAILED, UNAVAILABLE = (VERDICT_NAMES[v] for v in (VERDICT_PASS, VERDICT_FAIL, VERDICT_UNAVAILABLE))
TAMPERED = "tampered"
"""A segment's outcomes: the chain's verdict names, and TAMPERED (a served blob that is not the committed one,
voted as unavailable)."""
OUTCOME_VERDICTS = {PASSED: VERDICT_PASS, FAILED: VERDICT_FAIL, UNAVAILABLE: VERDICT_UNAVAILABLE,
                    TAMPERED: VERDICT_UNAVAILABLE}


@dataclasses.dataclass(frozen=True)
class SegmentClaim:
    """One sampled segment and the commitment it belongs to, as the chain records them."""

    task_id: int
    round: int
    worker: str  # bech32 address
    worker_index: int
    segment: int
    checkpoint_root: bytes
    num_checkpoints: int
    steps: int
    samples_processed: int
    start_weights_hash: bytes
    determinism_profile: str
    blob_url: str = ""
    update_hash: bytes = b""
    spec_hash: str = ""
    residual_hash: bytes = b""
    previous_residual_hash: bytes = b""  # the worker's residual of the round before (empty: zero)

    @classmethod
    def from_segment(cls, segment: SampledSegment) -> "SegmentClaim":
        """From one sampled segment the chain asks this validator to verify (`/market/verify/<validator>`)."""
        return cls(
            task_id=segment.task_id, round=segment.round, worker=segment.worker, worker_index=segment.worker_index,
            segment=segment.segment, checkpoint_root=bytes.fromhex(segment.checkpoint_root),
            num_checkpoints=segment.num_checkpoints, steps=segment.steps, samples_processed=segment.samples_processed,
            start_weights_hash=bytes.fromhex(segment.start_weights_hash),
            determinism_profile=segment.determinism_profile, blob_url=segment.fetch_url,
            update_hash=bytes.fromhex(segment.update_hash), spec_hash=segment.spec_hash,
            residual_hash=bytes.fromhex(segment.residual_hash),
            previous_residual_hash=bytes.fromhex(segment.previous_residual_hash),
        )

    @classmethod
    def from_json(cls, item: Mapping) -> "SegmentClaim":
        """From a claim as `to_json` writes it (a claim file, kept with the evidence for disputes)."""
        return cls(
            task_id=int(item["task_id"]), round=int(item["round"]), worker=str(item["worker"]),
            worker_index=int(item["worker_index"]), segment=int(item["segment"]),
            checkpoint_root=bytes.fromhex(item["checkpoint_root"]), num_checkpoints=int(item["num_checkpoints"]),
            steps=int(item["steps"]), samples_processed=int(item["samples_processed"]),
            start_weights_hash=bytes.fromhex(item["start_weights_hash"]),
            determinism_profile=str(item["determinism_profile"]), blob_url=str(item.get("blob_url", "")),
            update_hash=bytes.fromhex(item.get("update_hash", "")), spec_hash=str(item.get("spec_hash", "")),
            residual_hash=bytes.fromhex(item.get("residual_hash", "")),
            previous_residual_hash=bytes.fromhex(item.get("previous_residual_hash", "")),
        )

    @property
    def worker_bytes(self) -> bytes:
        return decode_address(self.worker)

    @property
    def key(self) -> tuple[int, int, str, int]:
        """What a validator votes on once: (task, round, worker, segment)."""
        return (self.task_id, self.round, self.worker, self.segment)

    def to_json(self) -> dict:
        return {
            "task_id": self.task_id, "round": self.round, "worker": self.worker, "worker_index": self.worker_index,
            "segment": self.segment, "checkpoint_root": self.checkpoint_root.hex(),
            "num_checkpoints": self.num_checkpoints, "steps": self.steps, "samples_processed": self.samples_processed,
            "start_weights_hash": self.start_weights_hash.hex(), "determinism_profile": self.determinism_profile,
            "blob_url": self.blob_url, "update_hash": self.update_hash.hex(), "spec_hash": self.spec_hash,
            "residual_hash": self.residual_hash.hex(), "previous_residual_hash": self.previous_residual_hash.hex(),
        }


@dataclasses.dataclass(frozen=True)
class SegmentReport:
    """A verdict on one segment and the numbers behind it."""

    claim: SegmentClaim
    outcome: str  # PASSED, FAILED, UNAVAILABLE or TAMPERED
    reason: str
    comparison: Comparison | None = None
    details: Mapping = dataclasses.field(default_factory=dict)

    @property
    def verdict(self) -> int:
        return OUTCOME_VERDICTS[self.outcome]

    @property
    def verdict_name(self) -> str:
        return VERDICT_NAMES[self.verdict]

    def to_json(self) -> dict:
        return {
            "claim": self.claim.to_json(), "outcome": self.outcome, "verdict": self.verdict_name,
            "reason": self.reason, "comparison": self.comparison.to_json() if self.comparison else None,
            "details": dict(self.details),
        }

    def evidence(self) -> bytes:
        """Canonical JSON of the report (timings left out, so two verifiers agreeing give the same bytes)."""
        document = self.to_json()
        document["details"] = {k: v for k, v in document["details"].items() if not k.endswith("_seconds")}
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def evidence_hash(self) -> bytes:
        return hashlib.sha256(self.evidence()).digest()


class CheckpointSource(Protocol):
    """Where a worker's checkpoints come from. `compute.blobs.BlobClient` is one (over HTTP)."""

    async def checkpoint_hashes(self, task_id: int, round_index: int) -> list[str]: ...

    async def fetch(self, digest: str) -> bytes: ...


def unavailable(claim: SegmentClaim, reason: str, tampered: bool = False) -> SegmentReport:
    return SegmentReport(claim, TAMPERED if tampered else UNAVAILABLE, reason)


def check_listing(claim: SegmentClaim, listing: list[str]) -> str:
    """"" when the served listing is the committed one (count and Merkle root)."""
    if len(listing) != claim.num_checkpoints:
        return f"the worker lists {len(listing)} checkpoints, it committed {claim.num_checkpoints}"
    try:
        root = merkle_root([bytes.fromhex(h) for h in listing])
    except (ValueError, ComputeError) as error:
        return f"the checkpoint listing is malformed: {error}"
    if root != claim.checkpoint_root:
        return f"the served checkpoints have Merkle root {root.hex()[:16]}..., the commitment says {claim.checkpoint_root.hex()[:16]}..."
    return ""


@dataclasses.dataclass(frozen=True)
class Replayed:
    """A segment replayed from its committed start checkpoint, not yet compared with its end."""

    start: TrainingState
    state: TrainingState
    same_profile: bool
    profile_id: str
    losses: tuple[float, ...] = ()
    """Each replayed step's loss: what this verifier's vote commits to (`evidence.py`), taken right after the
    replay (the replayer's `last_losses` belongs to whichever replay ran last)."""


def replay_segment(claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, start_bytes: bytes, replayer: Replayer, *,
                   expected_start_hash: bytes | None = None, expected_start_source: str = "aggregate",
                   spec_key: str = "") -> Replayed | SegmentReport:
    """Steps 3 and 4 as far as they need checkpoint i only: its checks, then the replay (or the FAIL report)."""
    problem = claims.check_expected_start(claim.start_weights_hash, expected_start_hash, expected_start_source)
    if problem:
        return SegmentReport(claim, FAILED, problem)
    try:  # shapes are checked against the spec's model before a byte of data is decoded; the replay only
        # reads the start (Trainer.load copies it), so its tensors are views of the fetched bytes
        start = decode_checkpoint(start_bytes, model_layout(spec, dataset.shape), copy=False)
    except ComputeError as error:
        return SegmentReport(claim, FAILED, f"a committed checkpoint does not decode: {error}")
    problem = claims.check_start_position(spec, steps=claim.steps, segment=claim.segment, start=start)
    if not problem and claim.segment == 0:
        problem = claims.check_round_start(start, claim.start_weights_hash)
    if problem:
        return SegmentReport(claim, FAILED, problem)
    try:
        replayed, same_profile, profile_id = replayer.replay(spec, dataset, claim, start, start_bytes, spec_key)
    except ProfileRefused as refusal:
        return SegmentReport(claim, FAILED, str(refusal))
    except ComputeError as error:  # the checkpoint does not fit the spec's model
        return SegmentReport(claim, FAILED, f"the start checkpoint cannot be replayed: {error}")
    losses = tuple(getattr(replayer, "last_losses", None) or ())  # stand-in replayers of tests may have none
    return Replayed(start, replayed, same_profile, profile_id, losses)


def compare_replay(claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, replayed: Replayed, end_bytes: bytes,
                   end_hash: bytes | None = None) -> SegmentReport:
    """The rest of step 4: checkpoint i + 1's checks and the comparison (`end_hash`: its hash from the checked
    listing; hashed here when not given)."""
    _, finish = segment_bounds(claim.segment, claim.steps, spec.training.checkpoint_every)
    expected = final_state(replayed.state) if finish == claim.steps else replayed.state
    expected_bytes = checkpoint_bytes(expected)
    if replayed.same_profile and same_bytes(expected_bytes, end_bytes):
        # The committed checkpoint is byte for byte the replay's, in the form the protocol puts at this
        # position: it is at the right step, with the right tensors. Nothing else to decode or compare.
        comparison = Comparison(BITWISE, True, "replay is bitwise identical", 0.0, 0.0, math.nan, 0.0)
        return SegmentReport(claim, PASSED, comparison.reason, comparison,
                             _details(claim, replayed, expected.step))
    try:
        end = decode_checkpoint(end_bytes, model_layout(spec, dataset.shape))
    except ComputeError as error:
        return SegmentReport(claim, FAILED, f"a committed checkpoint does not decode: {error}")
    problem = claims.check_end_position(spec, steps=claim.steps, segment=claim.segment, end=end)
    if problem:
        return SegmentReport(claim, FAILED, problem)
    state = final_state(replayed.state) if end.final else replayed.state  # the round's last: weights and step only
    # Same bytes means same hash: compare the replay's canonical bytes with the committed ones directly, and
    # hash the replay only when they differ (for the report). The committed hash is the listing's.
    claimed_hash = end_hash if end_hash is not None else hashlib.sha256(end_bytes).digest()
    replayed_bytes = checkpoint_bytes(state)
    identical = same_bytes(replayed_bytes, end_bytes)
    replayed_hash = claimed_hash if identical else hashlib.sha256(replayed_bytes).digest()
    comparison = compare_states(replayed.start, end, state, same_profile=replayed.same_profile,
                                claimed_hash=claimed_hash, replayed_hash=replayed_hash)
    return SegmentReport(claim, PASSED if comparison.passed else FAILED, comparison.reason, comparison,
                         _details(claim, replayed, end.step))


def _details(claim: SegmentClaim, replayed: Replayed, end_step: int) -> dict:
    details = {"replay_profile": replayed.profile_id, "committed_profile": claim.determinism_profile,
               "start_step": replayed.start.step, "end_step": end_step}
    if replayed.losses:  # what this verifier's vote commits to: only a replay yields it
        details[evidence.DETAIL] = evidence.losses_digest(replayed.losses).hex()
    return details


def same_bytes(first, second) -> bool:
    """Byte equality of two buffers without copying either: eight bytes at a time, then the tail."""
    a, b = memoryview(first).cast("B"), memoryview(second).cast("B")
    if len(a) != len(b):
        return False
    whole = len(a) - len(a) % 8
    return (bytes(a[whole:]) == bytes(b[whole:])
            and bool(np.array_equal(np.frombuffer(a[:whole], np.uint64), np.frombuffer(b[:whole], np.uint64))))


async def fetch_blob(claim: SegmentClaim, source: CheckpointSource, digest: str, what: str,
                     verified: VerifiedBlobs | None = None) -> bytes | SegmentReport:
    """One committed blob by hash (from `verified` when it was fetched and checked before), or the
    UNAVAILABLE/TAMPERED report that says why not."""
    if verified is not None:
        known = verified.get(digest)
        if known is not None:
            return known
    try:
        data = await source.fetch(digest)  # the source checks the hash (BlobClient, MemorySource, DirectorySource)
        if verified is not None:
            verified.put(digest, data)
        return data
    except BlobHashMismatch as error:
        return unavailable(claim, f"{what} was served with other bytes than committed: {error}", tampered=True)
    except BlobNotFound as error:
        return unavailable(claim, f"{what} is withheld: {error}")
    except BlobError as error:
        return unavailable(claim, f"{what} not served: {error}")


async def check_round_update(claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, source: CheckpointSource,
                             listing: list[str], have: dict[int, bytes], checks: UpdateChecks,
                             run, verified: VerifiedBlobs | None = None) -> UpdateVerdict:
    """The update check of the claim's (worker, round) (`update_check.py`), from `checks` when it was done
    already or is being done (by another sampled segment of the round verified at the same time). `have`:
    checkpoints already fetched, by index."""
    key = (claim.task_id, claim.round, claim.worker, claim.update_hash, claim.residual_hash,
           claim.previous_residual_hash, claim.checkpoint_root, claim.start_weights_hash, spec.codec)
    known = checks.get(key)
    if known is not None:
        return known
    running = checks.running(key)
    if running is None:
        running = asyncio.ensure_future(_check_update(key, claim, spec, dataset, source, listing, have, checks, run,
                                                      verified))
        checks.start(key, running)
    return await asyncio.shield(running)  # a caller cancelled leaves the check to the others waiting for it


async def _check_update(key: tuple, claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, source: CheckpointSource,
                        listing: list[str], have: dict[int, bytes], checks: UpdateChecks, run,
                        verified: VerifiedBlobs | None) -> UpdateVerdict:
    blobs = {}
    wanted = [(0, listing[0], "checkpoint 0"), (len(listing) - 1, listing[-1], f"checkpoint {len(listing) - 1}")]
    if claim.previous_residual_hash:
        wanted.append(("residual", claim.previous_residual_hash.hex(), "the previous round's residual"))
    for index, digest, what in wanted:
        if index in have:
            blobs[index] = have[index]
            continue
        fetched = await fetch_blob(claim, source, digest, what, verified)
        if isinstance(fetched, SegmentReport):
            return UpdateVerdict(fetched.outcome, f"the update cannot be checked: {fetched.reason}")
        blobs[index] = fetched
    layout = model_layout(spec, dataset.shape)
    verdict = await run(lambda: judge_update(
        get_codec(spec.codec), layout, first=blobs[0], last=blobs[len(listing) - 1],
        previous_residual=blobs.get("residual"), start_weights_hash=claim.start_weights_hash,
        update_hash=claim.update_hash, residual_hash=claim.residual_hash, workspace=checks.workspace))
    checks.put(key, verdict)
    checks.computed += 1
    return verdict


async def run_inline(function):
    """Run `function` here and now (the default of `verify_segment`'s `run_replay`)."""
    return function()


async def verify_segment(claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, source: CheckpointSource,
                         replayer: Replayer, *, expected_start_hash: bytes | None = None,
                         expected_start_source: str = "aggregate", spec_key: str = "",
                         run_replay=None) -> SegmentReport:
    """The whole check of one sampled segment (steps 1 to 5 above).

    `run_replay(function)` runs the CPU-heavy parts (an executor in the service); by default inline. With an
    executor, checkpoint i + 1 is fetched (and hash-checked) while checkpoint i is replayed: the replay does
    not need it until the comparison."""
    problem = claims.check_commitment(spec, steps=claim.steps, samples_processed=claim.samples_processed,
                                      num_checkpoints=claim.num_checkpoints, segment=claim.segment)
    if problem:
        return SegmentReport(claim, FAILED, problem)
    run = run_replay if run_replay is not None else run_inline
    verified = replayer.verified_blobs
    began = time.perf_counter()
    try:
        listing = await source.checkpoint_hashes(claim.task_id, claim.round)
    except BlobError as error:
        return unavailable(claim, f"checkpoint listing not served: {error}")
    problem = check_listing(claim, listing)
    if problem:
        return unavailable(claim, problem, tampered=True)
    start_bytes = await fetch_blob(claim, source, listing[claim.segment], f"checkpoint {claim.segment}", verified)
    if isinstance(start_bytes, SegmentReport):
        return start_bytes
    fetch_seconds = time.perf_counter() - began
    began = time.perf_counter()
    end_hash = bytes.fromhex(listing[claim.segment + 1])
    fetched_end: dict[str, bytes] = {}  # set by this (the event loop's) thread, read by the replay's

    def replay_then_compare() -> Replayed | SegmentReport:
        # Checkpoint i + 1 is usually fetched and checked before the replay is over: compare at once, in the
        # same turn of the replay thread, rather than queue the comparison behind the replay of another
        # segment in flight (which would hold this segment, and so the fetching of the next, until then).
        replayed = replay_segment(claim, spec, dataset, start_bytes, replayer, expected_start_hash=expected_start_hash,
                                  expected_start_source=expected_start_source, spec_key=spec_key)
        end = fetched_end.get("bytes")
        if isinstance(replayed, SegmentReport) or end is None:
            return replayed
        return compare_replay(claim, spec, dataset, replayed, end, end_hash)

    replaying = asyncio.ensure_future(run(replay_then_compare))
    try:
        end_bytes = await fetch_blob(claim, source, listing[claim.segment + 1], f"checkpoint {claim.segment + 1}",
                                     verified)
        if not isinstance(end_bytes, SegmentReport):
            fetched_end["bytes"] = end_bytes
    finally:
        replayed = await replaying  # never left running: the replayer is not thread-safe
    if isinstance(replayed, SegmentReport):
        report = replayed  # the replay's FAIL, or the comparison made right after it
    elif isinstance(end_bytes, SegmentReport):
        report = end_bytes
    else:
        report = await run(lambda: compare_replay(claim, spec, dataset, replayed, end_bytes, end_hash))
    timings = {"fetch_seconds": round(fetch_seconds, 4), "replay_seconds": round(time.perf_counter() - began, 4)}
    if report.outcome == PASSED:  # step 5: the round's update must follow from its committed checkpoints
        began = time.perf_counter()
        have = {claim.segment: start_bytes, claim.segment + 1: end_bytes}
        update = await check_round_update(claim, spec, dataset, source, listing, have, replayer.update_checks, run,
                                          verified)
        timings["update_check_seconds"] = round(time.perf_counter() - began, 4)
        if update.outcome != PASSED:
            report = SegmentReport(claim, update.outcome, update.reason, report.comparison, report.details)
    return dataclasses.replace(report, details={**report.details, **timings})
