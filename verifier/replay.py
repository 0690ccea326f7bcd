"""Replaying one sampled segment and judging it.

    claim  = SegmentClaim.from_query(item)              # one entry of /market/verify/<validator>
    report = await verify_segment(claim, spec, dataset, source, replayer)
    report.verdict                                      # VERDICT_PASS, VERDICT_FAIL or VERDICT_UNAVAILABLE

The steps, in order (each failure ends the check with its reason):

1. The commitment's own numbers (`claims.check_commitment`): checkpoint count, samples, segment index.
2. The worker's checkpoint listing must have `num_checkpoints` hashes whose Merkle root is the committed
   `checkpoint_root`; checkpoints i and i + 1 are fetched by hash (the blob client checks every byte).
   Nothing served, after retries: UNAVAILABLE ("unavailable"). Served but not what was committed (listing
   with another root, bytes with another hash): UNAVAILABLE as well ("tampered"), since the committed
   checkpoint was still not produced; the report says which.
3. Committed checkpoints that do not decode, sit at the wrong step, or (segment 0) do not hold the committed
   start weights with a fresh optimizer: FAIL. The start weights must also be the round's global weights
   when the caller knows them (`expected_start_hash`, from the aggregation check).
4. Replay with `train_segment` from checkpoint i and compare with checkpoint i + 1 (`tolerance.py`; for the
   round's last segment, the replay's step and weights, as that checkpoint holds no optimizer state): bit for
   bit under the committed profile (its thread count here, another instruction set in a child process,
   `isa_replay.py`), within the calibrated tolerance only when this CPU lacks the committed instruction set.
   A profile that no honest worker can have committed (another torch version, an unknown instruction set)
   is a FAIL.

The report carries the numbers behind the verdict; its canonical JSON is the evidence whose sha256 goes on
chain with the vote.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping
from typing import Protocol


from trolly.chain.crypto import decode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_NAMES, VERDICT_PASS, VERDICT_UNAVAILABLE
from trolly.compute.blobs.errors import BlobError, BlobHashMismatch, BlobNotFound
from trolly.compute.checkpoints import checkpoint_hash, decode_checkpoint, final_state
from trolly.compute.data.dataset import Dataset
from trolly.compute.errors import ComputeError
from trolly.compute.merkle import merkle_root
from trolly.compute.spec import TaskSpec

from . import claims, evidence
from .replayer import ProfileRefused, Replayer, parse_profile  # noqa: F401  (Replayer, parse_profile: re-exported)
from .tolerance import Comparison, compare_states

PASSED, FAILED, UNAVAILABLE, TAMPERED = "pass", "fail", "unavailable", "tampered"
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

    @classmethod
    def from_query(cls, item: Mapping) -> "SegmentClaim":
        """From one entry of `/market/verify/<validator>`."""
        return cls(
            task_id=int(item["task_id"]), round=int(item["round"]), worker=str(item["worker"]),
            worker_index=int(item["worker_index"]), segment=int(item["segment"]),
            checkpoint_root=bytes.fromhex(item["checkpoint_root"]), num_checkpoints=int(item["num_checkpoints"]),
            steps=int(item["steps"]), samples_processed=int(item["samples_processed"]),
            start_weights_hash=bytes.fromhex(item["start_weights_hash"]),
            determinism_profile=str(item["determinism_profile"]), blob_url=str(item.get("blob_url", "")),
            update_hash=bytes.fromhex(item.get("update_hash", "")), spec_hash=str(item.get("spec_hash", "")),
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


def judge_segment(claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, start_bytes: bytes, end_bytes: bytes,
                  replayer: Replayer, *, expected_start_hash: bytes | None = None,
                  expected_start_source: str = "aggregate", spec_key: str = "") -> SegmentReport:
    """Steps 3 and 4 on checkpoint bytes already checked against the committed root."""
    problem = claims.check_expected_start(claim.start_weights_hash, expected_start_hash, expected_start_source)
    if problem:
        return SegmentReport(claim, FAILED, problem)
    try:
        start, end = decode_checkpoint(start_bytes), decode_checkpoint(end_bytes)
    except ComputeError as error:
        return SegmentReport(claim, FAILED, f"a committed checkpoint does not decode: {error}")
    problem = claims.check_positions(spec, steps=claim.steps, segment=claim.segment, start=start, end=end)
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
    if end.final:  # the round's last segment: its checkpoint holds the weights and step only
        replayed = final_state(replayed)
    comparison = compare_states(start, end, replayed, same_profile=same_profile,
                                claimed_hash=hashlib.sha256(end_bytes).digest(), replayed_hash=checkpoint_hash(replayed))
    details = {"replay_profile": profile_id, "committed_profile": claim.determinism_profile,
               "start_step": start.step, "end_step": end.step}
    losses = getattr(replayer, "last_losses", None)  # stand-in replayers of tests may have none
    if losses:  # what this verifier's vote commits to: only a replay yields it
        details[evidence.DETAIL] = evidence.losses_digest(losses).hex()
    return SegmentReport(claim, PASSED if comparison.passed else FAILED, comparison.reason, comparison, details)


async def fetch_segment(claim: SegmentClaim, source: CheckpointSource) -> tuple[bytes, bytes] | SegmentReport:
    """Checkpoints i and i + 1 checked against the commitment, or the UNAVAILABLE/TAMPERED report."""
    try:
        listing = await source.checkpoint_hashes(claim.task_id, claim.round)
    except BlobError as error:
        return unavailable(claim, f"checkpoint listing not served: {error}")
    problem = check_listing(claim, listing)
    if problem:
        return unavailable(claim, problem, tampered=True)
    pieces = []
    for index in (claim.segment, claim.segment + 1):
        try:
            pieces.append(await source.fetch(listing[index]))
        except BlobHashMismatch as error:
            return unavailable(claim, f"checkpoint {index} was served with other bytes than committed: {error}", tampered=True)
        except BlobNotFound as error:
            return unavailable(claim, f"checkpoint {index} is withheld: {error}")
        except BlobError as error:
            return unavailable(claim, f"checkpoint {index} not served: {error}")
    return pieces[0], pieces[1]


async def verify_segment(claim: SegmentClaim, spec: TaskSpec, dataset: Dataset, source: CheckpointSource,
                         replayer: Replayer, *, expected_start_hash: bytes | None = None,
                         expected_start_source: str = "aggregate", spec_key: str = "",
                         run_replay=None) -> SegmentReport:
    """The whole check of one sampled segment (steps 1 to 4 above).

    `run_replay(function, *args)` runs the CPU-heavy part (an executor in the service); by default inline."""
    problem = claims.check_commitment(spec, steps=claim.steps, samples_processed=claim.samples_processed,
                                      num_checkpoints=claim.num_checkpoints, segment=claim.segment)
    if problem:
        return SegmentReport(claim, FAILED, problem)
    began = time.perf_counter()
    fetched = await fetch_segment(claim, source)
    if isinstance(fetched, SegmentReport):
        return fetched
    fetch_seconds = time.perf_counter() - began
    arguments = (claim, spec, dataset, fetched[0], fetched[1], replayer)
    options = {"expected_start_hash": expected_start_hash, "expected_start_source": expected_start_source,
               "spec_key": spec_key}
    began = time.perf_counter()
    if run_replay is None:
        report = judge_segment(*arguments, **options)
    else:
        report = await run_replay(lambda: judge_segment(*arguments, **options))
    timings = {"fetch_seconds": round(fetch_seconds, 4), "replay_seconds": round(time.perf_counter() - began, 4)}
    return dataclasses.replace(report, details={**report.details, **timings})
