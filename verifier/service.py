"""The verifier service: follow the chain, replay what this validator must check, vote once per segment.

    service = VerifierService(config, signer)      # signer: the validator operator's key, from the keyring
    await service.run(stop_event)                  # or: await service.run_once() for one pass

Lifecycle of one pass (on every new block; a websocket `NewBlock` subscription wakes it, and when the
websocket is not available it polls `status` every `poll_interval` seconds):

1. Confirm earlier votes: broadcast ones are looked up (`tx`), reserved ones (a crash between reserving and
   broadcasting) are re-sent as the exact stored bytes. On a pass with nothing due, running tasks are loaded
   ahead (spec, dataset, W_0), so the first votes of a round are not late for its verification window.
2. Ask `/market/verify/<operator address>` for the segments this validator has not voted on, skip those in
   the vote record or already in flight, and verify up to `concurrency` at a time: spec from
   `/market/spec/<id>` (its hash checked), dataset from the spec's URLs and the worker's blob service (every
   blob hash-checked), the round's start weights as this verifier derives them (`compute/weights_follower.py`:
   W_0 from the spec, each later start from the updates it checked; a start it cannot derive is voted
   UNAVAILABLE, never taken from the chain or a worker), then `replay.verify_segment` (for a final report:
   `final_report.verify_final_report`, the reported hash against the W_R derived here).
   Replays run one at a time in a single worker thread (torch's thread count is process-wide).
3. A segment whose checkpoints cannot be fetched is retried on later passes across the whole verification
   window: it is voted UNAVAILABLE only once the window's deadline is `deadline_margin` blocks away (from then
   it is tried at every pass, whatever its retry delay) and after at least `unavailable_attempts` failures, so
   a worker unreachable for a while (its blob port flooded, a restart) is still verified when it comes back.
4. The pass's verdicts on one round go out in one transaction (one message per segment). Each is written to
   the vote record with that signed transaction *before* it is broadcast, with the salt and replay digest its
   `replay_commitment` hides (`evidence.py`), and its evidence (the report's canonical JSON) is kept under
   `evidence/<sha256>.json` for disputes.
5. Once a round has settled, the included votes' replay digests are revealed (`MsgRevealReplay`, one
   transaction per round) before the round's reveal deadline; a vote left unrevealed costs the validator its
   verifier fee and a penalty on its stake.

Failures that are nobody's fault on the worker's side (the node is down, the spec cannot be parsed, the dataset
cannot be fetched) never produce a vote: they are logged and retried.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import pathlib
import time

import aiohttp

from trolly.chain.crypto import PrivateKey, decode_address, encode_address
from trolly.chain.market.records import RUNNING
from trolly.chain.proto.market_pb2 import MsgDeclareReplayGpus, MsgRevealReplay, MsgSubmitVerdict
from trolly.compute.blobs import AddressPolicy, BlobClient, RetryPolicy
from trolly.compute.errors import BaseModelMissing, ComputeError
from trolly.compute.models.base_model import require_base_model
from trolly.compute.sealed_keys import BadDataKey, bad_key_report, received_data_key
from trolly.compute.spec import parse_spec
from trolly.compute.weights_follower import DirectoryCache, StartUnavailable, WeightsFollower
from trolly.wallet.errors import WalletError
from trolly.wallet.files import write_atomically
from trolly.wallet.market_queries import get_round, get_spec, get_task, get_task_overview, get_verify_work, list_tasks
from trolly.wallet.metrics_endpoint import CONTINUE, MetricsEndpoint, start_metrics_endpoint
from trolly.wallet.nonces import NonceCache
from trolly.wallet.rpc import DEFAULT_NODE, AsyncRpcClient
from trolly.wallet.sender import CHAIN_CODESPACE, INVALID_NONCE_CODE, TxSender

from . import evidence
from .dataset_fetch import TaskDatasets
from .errors import VerifierError, WorkUnavailable
from .final_report import verify_final_report
from .metrics import VerifierMetrics
from .replay_profile import ProfileNotHere
from .segment_check import FAILED, PASSED, TAMPERED, UNAVAILABLE, Replayer, SegmentClaim, SegmentReport, verify_segment
from .votes import BROADCAST, INCLUDED, REJECTED, RESERVED, VoteRecord

log = logging.getLogger("trolly.verifier")


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    home: pathlib.Path
    """Vote record, evidence, cached global weights, nonce cache."""
    node: str = DEFAULT_NODE
    concurrency: int = 2
    """Segments verified at once (fetching overlaps; replays still run one at a time)."""
    poll_interval: float = 2.0
    """Seconds between polls when no websocket is available (and the longest wait between passes)."""
    unavailable_attempts: int = 3
    """Failed fetches of a segment's checkpoints, over separate passes, at least, before voting UNAVAILABLE."""
    retry_delay: float = 5.0
    """Seconds before a segment whose checkpoints could not be fetched is tried again."""
    deadline_margin: int = 10
    """Blocks before the verification deadline at which a still unreachable segment is voted UNAVAILABLE (not
    before: fetches are retried across the window). Enough for the last fetch attempts and the vote's inclusion
    at sub-second block times."""
    fee: int | None = None
    """Fee per verdict in utrl; None: the chain's minimum fee."""
    websocket: bool = True
    blob_retry: RetryPolicy = RetryPolicy(attempts=2, initial_delay=0.5, max_delay=2.0, request_timeout=30.0)
    lazy_pass_without_replay: bool = False
    """TEST SWITCH, never for a real validator: vote PASS on every segment without fetching or replaying it,
    committed to a made-up replay digest. It exists so that tests show such a lazy verifier is found out (its
    reveal disagrees with the replaying majority: no verifier fee, and a penalty on its stake)."""
    fail_without_replay: bool = False
    """TEST SWITCH, never for a real validator: vote FAIL on every segment, honest or not, without replaying it.
    It exists so that tests show a dishonest validator outvoted by the others, its votes on chain for all to see."""
    never_vote: bool = False
    """TEST SWITCH, never for a real validator: follow the chain but never vote (a validator whose verifier is
    silent), so that tests show the others still decide its committees' segments."""
    allow_private_blob_hosts: bool = False
    """Fetch checkpoints and datasets from loopback, private and link-local addresses too. Off by default: blob
    URLs come from strangers (compute/blobs/connect_policy.py); a localnet turns it on. Metadata stays refused."""
    metrics_address: str = ""
    """Where `run` serves this verifier's Prometheus metrics (HOST:PORT; '' or '0': nowhere)."""
    metrics_port_in_use: str = CONTINUE
    """That address taken: `continue` without metrics, or `refuse` to start (`wallet/metrics_endpoint.py`)."""


@dataclasses.dataclass
class TaskContext:
    spec: object
    spec_key: str
    dataset: object
    weights: WeightsFollower  # W_0 and each round's start, derived here


@dataclasses.dataclass
class Progress:
    height: int = 0
    pending: int = 0
    in_flight: int = 0
    verified: int = 0
    started: float = dataclasses.field(default_factory=time.monotonic)


class VerifierService:
    def __init__(self, config: ServiceConfig, signer: PrivateKey, client: AsyncRpcClient | None = None) -> None:
        self.config = config
        self.signer = signer
        self.address = encode_address(signer.address)
        self.client = client or AsyncRpcClient(config.node)
        config.home.mkdir(parents=True, exist_ok=True)
        self.record = VoteRecord(config.home / "votes.sqlite")
        self.sender = TxSender(self.client, NonceCache(config.home))
        self.replayer = Replayer()
        self.progress = Progress()
        self.metrics = VerifierMetrics()
        """What this verifier did (`metrics.py`), served at `config.metrics_address` while `run` runs."""
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay")
        self._tasks: dict[int, TaskContext] = {}
        self.datasets = TaskDatasets()
        """The datasets of the tasks it verifies: the bundled ones built once for the life of the service."""
        self._in_flight: set[tuple] = set()
        self._retry_at: dict[tuple, float] = {}
        self._last_calls: set[tuple] = set()
        """Segments given their attempt at the end of their window regardless of their retry delay."""
        self._missing_base: set[int] = set()  # tasks whose pinned base model this verifier lacks (said once)
        self._send_lock = asyncio.Lock()
        self._semaphore = asyncio.Semaphore(config.concurrency)
        self.addresses = AddressPolicy(allow_private=config.allow_private_blob_hosts)
        self._fee: int | None = config.fee
        self._last_progress: tuple = ()
        self._gpu_declared = False

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Pass after pass until `stop` is set; a failing pass is logged and the next one tries again."""
        stop = stop or asyncio.Event()
        wake = asyncio.Event()
        endpoint = self.serve_metrics()
        follower = asyncio.create_task(self._follow_blocks(wake, stop), name="follow-blocks")
        log.info("verifier %s following %s (home %s)", self.address, self.client.url, self.config.home)
        try:
            while not stop.is_set():
                try:
                    await self.run_once()
                except (VerifierError, WalletError, ComputeError) as error:
                    log.warning("pass failed: %s", error)
                wake.clear()
                waiters = [asyncio.create_task(wake.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(waiters, timeout=self.config.poll_interval, return_when=asyncio.FIRST_COMPLETED)
                for waiter in waiters:
                    waiter.cancel()
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            if endpoint is not None:
                endpoint.close()
            await self.close()

    def serve_metrics(self) -> MetricsEndpoint | None:
        """Serve this verifier's metrics at `config.metrics_address` (None: nowhere, or taken and `continue`);
        raises `MetricsPortInUse` when it is taken and the configuration says `refuse`."""
        return start_metrics_endpoint(self.config.metrics_address, self.metrics.registry, f"verifier {self.address}",
                                      self.config.metrics_port_in_use)

    async def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.replayer.close()
        self.record.close()
        await self.client.close()

    async def _follow_blocks(self, wake: asyncio.Event, stop: asyncio.Event) -> None:
        """Set `wake` on every NewBlock from the node's websocket; on any failure, leave polling to `run`."""
        if not self.config.websocket:
            return
        url = self.client.url.replace("http://", "ws://").replace("https://", "wss://") + "/websocket"
        while not stop.is_set():
            try:
                async with aiohttp.ClientSession() as session, session.ws_connect(url, heartbeat=30) as socket:
                    await socket.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe",
                                            "params": {"query": "tm.event = 'NewBlock'"}})
                    log.info("subscribed to new blocks at %s", url)
                    async for message in socket:
                        if message.type == aiohttp.WSMsgType.TEXT:
                            wake.set()
                        elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                            break
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
                log.info("no websocket at %s (%s); polling every %.1fs", url, error, self.config.poll_interval)
            await asyncio.sleep(max(self.config.poll_interval, 5.0))

    # ---- one pass --------------------------------------------------------------------------------------------

    async def run_once(self) -> list[SegmentReport]:
        """Confirm earlier votes, then verify and vote on everything due now. Returns the reports voted."""
        status = await self.client.status()
        self.progress.height = status.latest_block_height
        await self._confirm_votes()
        await self._declare_replay_gpu()
        work = await get_verify_work(self.client, self.address)
        for reason in work.unreadable:
            log.warning("skipping a malformed entry of /market/verify: %s", reason)
        voted = self.record.voted_keys()
        now = time.monotonic()
        due = []
        for segment in work.segments:
            claim = SegmentClaim.from_segment(segment)
            if claim.key in voted or claim.key in self._in_flight:
                continue
            # A segment waiting to be retried gets one attempt as soon as its window's end is near, whatever its
            # retry delay: with fast blocks the margin can pass within one delay.
            last_call = bool(segment.deadline) and self.progress.height >= segment.deadline - self.config.deadline_margin
            if self._retry_at.get(claim.key, 0) > now and not (last_call and claim.key not in self._last_calls):
                continue
            if last_call:
                self._last_calls.add(claim.key)
            due.append((claim, segment.deadline))
        self.progress.pending = len(work.segments) + len(work.unreadable)
        if not due:
            await self._warm_up()
        results = await asyncio.gather(*(self._verify_and_vote(claim, deadline) for claim, deadline in due))
        reports = [report for report in results if report is not None]
        by_round: dict[tuple[int, int], list[SegmentReport]] = {}
        for report in reports:
            by_round.setdefault((report.claim.task_id, report.claim.round), []).append(report)
        voted_reports = []
        for round_reports in by_round.values():
            voted_reports += await self.vote_round(round_reports)
        await self._reveal_due()
        self._log_progress()
        return voted_reports

    async def _verify_and_vote(self, claim: SegmentClaim, deadline: int) -> SegmentReport | None:
        """The report to vote on one segment (the caller votes a round's reports together), or None for now."""
        if self.config.never_vote:
            return None
        if self.config.lazy_pass_without_replay:
            return lazy_report(claim)
        if self.config.fail_without_replay:
            return failing_report(claim)
        self._in_flight.add(claim.key)
        try:
            async with self._semaphore:
                self.progress.in_flight += 1
                try:
                    report = await self.verify(claim)
                finally:
                    self.progress.in_flight -= 1
            if report is None:
                return None
            if report.outcome in (UNAVAILABLE, TAMPERED):
                attempts = self.record.add_attempt(claim.key, report.reason)
                # Voted once the window's end is `deadline_margin` blocks away and enough attempts failed (an
                # unknown deadline, 0, counts as near); near the end, retried at every pass, not after a delay.
                near_deadline = not deadline or self.progress.height >= deadline - self.config.deadline_margin
                if attempts < self.config.unavailable_attempts or not near_deadline:
                    delay = 0.0 if deadline and near_deadline else self.config.retry_delay
                    self._retry_at[claim.key] = time.monotonic() + delay
                    log.info("%s: %s (attempt %d of %d, retrying)", _name(claim), report.reason, attempts,
                             self.config.unavailable_attempts)
                    return None
            return report
        finally:
            self._in_flight.discard(claim.key)

    async def verify(self, claim: SegmentClaim) -> SegmentReport | None:
        """The report for one segment, or None when the verifier itself could not do the work (retried later)."""
        try:
            context = await self._task_context(claim)
            expected, final_report = await self._derived_start(claim, context)
        except StartUnavailable as error:
            return SegmentReport(claim, UNAVAILABLE, f"this verifier cannot derive the round's start weights: {error}")
        except BaseModelMissing as error:  # this verifier lacks the pinned model: no fault of the worker's
            if claim.task_id not in self._missing_base:
                log.warning("task %d: %s; this verifier votes nothing on it", claim.task_id, error)
                self._missing_base.add(claim.task_id)
            self._retry_at[claim.key] = time.monotonic() + self.config.retry_delay
            return None
        except (VerifierError, ComputeError, WalletError) as error:
            log.warning("%s: cannot verify yet: %s", _name(claim), error)
            self._retry_at[claim.key] = time.monotonic() + self.config.retry_delay
            return None
        if final_report:
            self.progress.verified += 1
            return verify_final_report(claim, expected)
        loop = asyncio.get_running_loop()
        began = time.perf_counter()
        try:
            async with BlobClient([claim.blob_url], retry=self.config.blob_retry,
                                  address_policy=self.addresses) as blobs:
                report = await verify_segment(
                    claim, context.spec, context.dataset, blobs, self.replayer, expected_start_hash=expected,
                    expected_start_source="derived by this verifier", spec_key=context.spec_key,
                    run_replay=lambda function: loop.run_in_executor(self._executor, function))
        except ProfileNotHere as error:  # its GPU here but not its instruction set: no judgement, not the worker's fault
            log.warning("%s: %s; this verifier votes nothing on it", _name(claim), error)
            self._retry_at[claim.key] = time.monotonic() + self.config.retry_delay
            return None
        except VerifierError as error:  # our own replay machinery failed (a child died): not the worker's fault
            log.warning("%s: replay failed here, will retry: %s", _name(claim), error)
            self._retry_at[claim.key] = time.monotonic() + self.config.retry_delay
            return None
        self.progress.verified += 1
        self.metrics.replay_seconds.observe(time.perf_counter() - began)
        self.metrics.segments_replayed.labels(report.outcome).inc()
        return report

    # ---- what a segment needs ------------------------------------------------------------------------------

    async def _task_context(self, claim: SegmentClaim) -> TaskContext:
        return await self._load_task(claim.task_id, [claim.blob_url])

    async def _load_task(self, task_id: int, extra_urls: list[str]) -> TaskContext:
        """Spec (hash-checked), dataset and W_0 of a task, loaded once and kept."""
        context = self._tasks.get(task_id)
        if context is not None:
            return context
        answer = await get_spec(self.client, task_id)
        spec_bytes = answer.spec_bytes
        if hashlib.sha256(spec_bytes).hexdigest() != answer.spec_hash:
            raise WorkUnavailable(f"task {task_id}'s spec does not hash to its recorded spec_hash")
        spec = parse_spec(spec_bytes)
        require_base_model(spec.model.config)  # before fetching anything: without it nothing can be replayed
        dataset = await self.datasets.task_dataset(spec, extra_urls, self.config.blob_retry, self.addresses,
                                                   await self._data_key(task_id))
        weights = WeightsFollower(spec, dataset.shape, self.addresses, retry=self.config.blob_retry,
                                  cache=DirectoryCache(self.config.home / "weights" / str(task_id)))
        await asyncio.get_running_loop().run_in_executor(self._executor, weights.initial)
        context = TaskContext(spec, answer.spec_hash, dataset, weights)
        self._tasks[task_id] = context
        return context

    async def _data_key(self, task_id: int) -> bytes | None:
        """The data key of a private task as delivered to this validator's operator, None while it is not (the
        requester delivers it once this validator is drawn onto one of the task's committees; a public task has
        no box). A box that does not open with the operator key, or holds another key than the task committed
        to, is the requester's fault, never the worker's: reported on chain once (`MsgReportBadKey`: this
        validator then owes no vote on the task, and the worker is paid), and WorkUnavailable, no vote."""
        task = await get_task_overview(self.client, task_id)
        if not task.private_data:
            return None
        try:
            return await received_data_key(self.client, task_id, self.signer, task.data_key_hash)
        except BadDataKey as bad:
            if not bad.reported:
                plan = await self.sender.plan(self.address, [bad_key_report(task_id, self.signer, bad.sealed)],
                                              await self._fee_amount())
                await self.sender.send(self.signer, plan, wait=True, timeout=60.0)
                log.warning("task %d: %s; reported on chain, no vote on this task", task_id, bad)
            raise WorkUnavailable(f"{bad}: reported on chain, no vote on this task") from None

    async def _warm_up(self) -> None:
        """Load running tasks before their segments are sampled, so votes are not late for the window."""
        try:
            tasks = await list_tasks(self.client, open_only=True)
        except WalletError as error:
            log.debug("no task listing: %s", error)
            return
        for summary in tasks:
            if summary.status != RUNNING or summary.id in self._tasks:
                continue
            try:
                task = await get_task(self.client, summary.id)
                await self._load_task(summary.id, [m.fetch_url for m in task.members])
                log.info("task %d loaded (spec, dataset, initial weights)", summary.id)
            except (VerifierError, ComputeError, WalletError) as error:
                log.info("task %d not loaded yet: %s", summary.id, error)

    async def _derived_start(self, claim: SegmentClaim, context: TaskContext) -> tuple[bytes, bool]:
        """The round's start weights hash as this verifier derives it (W_0 from the spec, W_r from W_{r-1} and
        the updates of round r-1 it fetched and checked itself; for the final report, W_R), and whether the
        claim is the final report. Never the chain's majority nor a worker's word: raises StartUnavailable when
        it cannot derive it (the segment is then voted UNAVAILABLE)."""
        task = await get_task(self.client, claim.task_id)
        state = await context.weights.state(claim.round, task)
        return state.weights_hash(), claim.round == task.rounds

    # ---- voting -----------------------------------------------------------------------------------------------

    async def _declare_replay_gpu(self) -> None:
        """Once a run, on a machine with a GPU: declare on chain the GPU part this verifier replays bit for bit
        (`replay_profile.local_gpu`), so the committees of segments trained on that GPU are drawn from validators
        that can judge them (`chain.market.replay_gpus`). A machine without CUDA declares nothing."""
        if self._gpu_declared or self.replayer.gpu is None:
            return
        async with self._send_lock:
            plan = await self.sender.plan(self.address, [MsgDeclareReplayGpus(gpus=[self.replayer.gpu])],
                                          await self._fee_amount())
            await self.sender.send(self.signer, plan, wait=True, timeout=60.0)
        self._gpu_declared = True
        log.info("declared on chain that this verifier replays %s", self.replayer.gpu)

    async def vote(self, report: SegmentReport) -> None:
        """Vote on one segment (a round of one): see `vote_round`."""
        await self.vote_round([report])

    async def vote_round(self, reports: list[SegmentReport]) -> list[SegmentReport]:
        """Reserve, sign and broadcast the verdicts on one round's segments in one transaction; never a second
        vote on a segment. Returns the reports voted now."""
        async with self._send_lock:
            reports = [r for r in reports if self.record.get(r.claim.key) is None]
            if not reports:
                return []
            messages, rows = [], []
            for report in reports:
                claim = report.claim
                evidence_hash = hashlib.sha256(report.evidence()).digest()
                self._save_evidence(evidence_hash, report)
                salt, digest = evidence.new_salt(), evidence.replay_digest(report)
                messages.append(MsgSubmitVerdict(
                    task_id=claim.task_id, round=claim.round, worker=claim.worker_bytes, segment=claim.segment,
                    verdict=report.verdict, evidence_hash=evidence_hash,
                    replay_commitment=evidence.commitment(self.signer.address, salt, digest)))
                rows.append((claim.key, report.verdict, report.outcome, report.reason, evidence_hash.hex(), salt, digest))
            keys = [report.claim.key for report in reports]
            for _ in range(2):  # a second time only when CheckTx refused the nonce: the votes were released
                plan = await self.sender.plan(self.address, messages, await self._fee_amount())
                signed = plan.sign(self.signer)
                if not self.record.reserve_batch(rows, signed):
                    return []
                if await self._broadcast(keys, signed):
                    break
            else:
                return []
            for key in keys:
                self._retry_at.pop(key, None)
        for report in reports:
            log.info("%s: voted %s (%s)", _name(report.claim), report.verdict_name.upper(), report.reason)
            self.metrics.votes.labels(report.verdict_name).inc()
        return reports

    async def _reveal_due(self) -> None:
        """Reveal the replay digests of included votes whose round has settled, one transaction per round;
        votes whose reveal window has closed are marked missed, and votes the chain accepted without counting
        them (the segment was decided before they arrived) late: revealing one would be refused, and with it the
        whole transaction of the round's reveals. Once the window closed the chain deletes the round's votes
        (`verdicts_deleted`): an unrevealed vote of such a round is missed, whether or not it had been counted (a
        round that never settled has no window: its votes are late)."""
        pending: dict[tuple[int, int], list[tuple]] = {}
        for key, salt, digest in self.record.unrevealed():
            pending.setdefault((key[0], key[1]), []).append((key, salt, digest))
        for (task_id, round_), entries in pending.items():
            try:
                details = await get_round(self.client.query_json, task_id, round_)
            except WalletError as error:
                log.debug("task %d round %d not readable for reveals yet: %s", task_id, round_, error)
                continue
            deadlines = {c.worker: c.reveal_deadline for c in details.commitments}
            counted = {(c.worker, v.segment) for c in details.commitments for v in c.verdicts
                       if v.validator == self.address}
            deleted = {c.worker for c in details.commitments if c.verdicts_deleted}
            ready, missed, late = [], [], []
            for key, salt, digest in entries:
                deadline = deadlines.get(key[2], 0)
                if key[2] in deleted:  # the window closed (or the task ended unsettled) and the chain deleted the votes
                    (missed if deadline else late).append(key)
                elif deadline and (key[2], key[3]) not in counted:
                    late.append(key)  # accepted after others decided it (`verdict_late`): nothing to reveal
                elif deadline and self.progress.height > deadline:
                    missed.append(key)
                elif deadline:
                    ready.append((key, salt, digest))
            if late:
                self.record.mark_revealed(late, "late")
            if missed:
                self.record.mark_revealed(missed, "missed")
                self.metrics.missed_reveals.inc(len(missed))
                log.warning("task %d round %d: the reveal window closed before %d reveals", task_id, round_, len(missed))
            if ready:
                await self._send_reveals(task_id, round_, ready)

    async def _send_reveals(self, task_id: int, round_: int, ready: list[tuple]) -> None:
        messages = [MsgRevealReplay(task_id=task_id, round=round_, worker=_worker_bytes(key[2]), segment=key[3],
                                    salt=salt, replay_digest=digest) for key, salt, digest in ready]
        keys = [key for key, _, _ in ready]
        async with self._send_lock:
            plan = await self.sender.plan(self.address, messages, await self._fee_amount())
            signed = plan.sign(self.signer)
            result = await self.client.broadcast_tx_sync(signed, check=False)
            if result.code == 0:
                if self.sender.nonce_cache is not None:
                    self.sender.nonce_cache.remember(self.address, _nonce_of(signed) + 1)
                self.record.mark_revealed(keys, "sent", result.hash)
                log.info("task %d round %d: revealed %d replay digests", task_id, round_, len(keys))
            elif result.code == INVALID_NONCE_CODE and result.codespace == CHAIN_CODESPACE:
                if self.sender.nonce_cache is not None:
                    self.sender.nonce_cache.forget(self.address)  # retried on the next pass
            else:
                self.record.mark_revealed(keys, "refused")
                log.warning("task %d round %d: reveals refused by CheckTx: %s", task_id, round_, result.log)

    async def _broadcast(self, keys: list[tuple], signed: bytes) -> bool:
        """Hand one signed transaction (the votes on `keys`) to the node and record what became of it. False
        when CheckTx refused its nonce: the votes are released (and the nonce memory forgotten), so that signing
        them again at once, with the node's nonce, sends them (a remembered nonce goes stale when a transaction
        of ours leaves the mempools unincluded, as one whose segments others decided first does)."""
        result = await self.client.broadcast_tx_sync(signed, check=False)
        if result.code == 0:
            if self.sender.nonce_cache is not None:
                plan_nonce = _nonce_of(signed)
                self.sender.nonce_cache.remember(self.address, plan_nonce + 1)
            for key in keys:
                self.record.mark(key, BROADCAST, tx_hash=result.hash)
            return True
        else:
            log.warning("votes on %s refused by CheckTx: %s", keys, result.log)
            if result.code == INVALID_NONCE_CODE and result.codespace == CHAIN_CODESPACE:
                # Never reached the mempool, so it can never be counted: forget it and vote again later.
                if self.sender.nonce_cache is not None:
                    self.sender.nonce_cache.forget(self.address)
                for key in keys:
                    self.record.release(key)
                    self._retry_at[key] = time.monotonic() + self.config.retry_delay
                return False
            else:
                for key in keys:
                    self.record.mark(key, REJECTED, tx_hash=result.hash,
                                     log=f"code {result.code} ({result.codespace}): {result.log}")
        return True

    async def _confirm_votes(self) -> None:
        reserved: dict[bytes, list[tuple]] = {}
        for row in self.record.unfinished():
            if row.status == RESERVED:  # crashed before the broadcast: send the very same bytes, once per tx
                reserved.setdefault(row.signed_tx, []).append(row.key)
                continue
            found = await self.client.find_tx(row.tx_hash)
            if found is None:
                continue
            if found.code == 0:
                self.record.mark(row.key, INCLUDED, height=found.height)
            else:
                self.record.mark(row.key, REJECTED, height=found.height, log=f"code {found.code}: {found.log}")
                log.warning("vote on %s failed in block %d: %s", row.key, found.height, found.log)
        for signed, keys in reserved.items():
            async with self._send_lock:
                await self._broadcast(keys, signed)

    async def _fee_amount(self) -> int | None:
        """The configured fee, or None: the sender then pays the chain's minimum for each verdict's size."""
        return self._fee

    def _save_evidence(self, evidence_hash: bytes, report: SegmentReport) -> None:
        path = self.config.home / "evidence" / f"{evidence_hash.hex()}.json"
        document = {"evidence": json.loads(report.evidence()), "report": report.to_json()}
        write_atomically(path, json.dumps(document, indent=2).encode())

    def _log_progress(self) -> None:
        counts = self.record.counts()
        snapshot = (self.progress.pending, len(self._in_flight), tuple(sorted(counts.items())))
        # One line per change, not per poll: an idle verifier stays quiet (debug level shows every pass).
        level = logging.INFO if snapshot != self._last_progress else logging.DEBUG
        self._last_progress = snapshot
        log.log(level, "height %d: %d segments awaiting this validator, %d in flight; votes: %d pass, %d fail, "
                 "%d unavailable (%d included, %d in mempool, %d refused)", self.progress.height, self.progress.pending,
                 len(self._in_flight), counts.get("pass", 0), counts.get("fail", 0),
                 counts.get("unavailable", 0) + counts.get("tampered", 0), counts.get(INCLUDED, 0),
                 counts.get(BROADCAST, 0) + counts.get(RESERVED, 0), counts.get(REJECTED, 0))


def lazy_report(claim: SegmentClaim) -> SegmentReport:
    """TEST SWITCH (`ServiceConfig.lazy_pass_without_replay`): PASS without a replay, committed to a digest made
    up from public data, since the real one (the replayed losses) needs the replay it skipped."""
    guess = hashlib.sha256(b"lazy guess" + claim.checkpoint_root + claim.segment.to_bytes(8, "big")).hexdigest()
    return SegmentReport(claim, PASSED, "TEST SWITCH: voted PASS without replaying", details={evidence.DETAIL: guess})


def failing_report(claim: SegmentClaim) -> SegmentReport:
    """TEST SWITCH (`ServiceConfig.fail_without_replay`): FAIL without a replay, committed to a made-up digest."""
    guess = hashlib.sha256(b"dishonest fail" + claim.checkpoint_root + claim.segment.to_bytes(8, "big")).hexdigest()
    return SegmentReport(claim, FAILED, "TEST SWITCH: voted FAIL without replaying", details={evidence.DETAIL: guess})


def _worker_bytes(worker: str) -> bytes:
    return decode_address(worker)


def _nonce_of(signed: bytes) -> int:
    from trolly.chain.tx import decode_tx

    return decode_tx(signed).body.nonce


def _name(claim: SegmentClaim) -> str:
    return f"task {claim.task_id} round {claim.round} worker {claim.worker[:14]}... segment {claim.segment}"
