"""The worker service: start (blob service, throughput, registration), run (tasks, rounds), stop.

    service = WorkerService(home, config, key, ServiceOptions(max_tasks=1))
    await service.start()
    await service.run()        # until max_tasks tasks are finished, or stop() is called
    await service.stop()

`run` works on one task at a time. For a task, it asks the chain what is going on (`plan.decide`) and does
that: train and commit a round, report the final weights, mirror the others' updates while verification
runs, or wait. Every step's result is saved (`progress.py`) before the next begins, so a worker killed at any
moment and started again picks up where it was, mid-round included, and never commits a round twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import pathlib
import shutil
import threading
import time

from trolly.chain.crypto import PrivateKey
from trolly.chain.market.records import LIVE_STATUSES, PASSED
from trolly.chain.market.spec import KERNELS, TORCH_KERNEL
from trolly.wallet.errors import (InclusionTimeout, InsufficientBalance, NodeUnreachable, QueryFailed, RpcError,
                                  TxRejected)
from trolly.wallet.market_views import TaskSummary, TaskView
from trolly.wallet.metrics_endpoint import CONTINUE, MetricsEndpoint, MetricsEndpointError, start_metrics_endpoint
from trolly.wallet.rpc import AsyncRpcClient

from ..blobs import AddressPolicy, BlobError, BlobServer, BlobStore
from ..blobs.relay_push import RelayPusher
from ..acceleration import Acceleration
from ..cheats import get_cheat
from ..checkpoints import TrainingState, encode_weights
from ..data import Dataset
from ..data.fetch import missing_bytes
from ..data.manifest import is_private, loaded_bytes
from ..determinism import require_replayable_process
from ..errors import CheatError, DatasetError, SpecError
from ..outer_step import GlobalState
from ..sealed_keys import BadDataKey, bad_key_report, received_data_key
from ..spec import TaskSpec, parse_spec
from ..training import Trainer, evaluate
from ..wasm.trainer import trainer_for
from ..weights_follower import StartUnavailable, WeightsFollower, round_updates
from . import plan
from .cheat_round import play_cheat_round
from .config import WorkerConfig
from .data import obtain_blobs, obtain_dataset, read_manifest
from .display import RoundDisplay
from .errors import DataKeyWaiting, TaskUnfit, WeightsMismatch, WorkerError
from .fit import check_disk, check_memory, on_device
from .housekeeping import prune_task
from .commits import Committer
from .market import MarketClient
from .metrics import WorkerMetrics
from .round_training import (ResidualStore, RoundInterrupted, TrainedRound, commitment, encode_update, final_report,
                             previous_residual, train_round)
from .progress import TaskProgress, WorkerState
from .replacement import prepare_replacement
from .strategies import TrainingStrategy
from .preflight import describe_hardware, measure, measured_differently, unfit_reasons
from .preflight_record import Preflight
from .throughput import BlockClock, measure_trainer, plan_steps
from .weights import ProgressCache

log = logging.getLogger("trolly.worker")

INTERNAL_RPC_ERROR = -32603
"""JSON-RPC internal error: what a node answers while its ABCI app is down."""


@dataclasses.dataclass(frozen=True)
class ServiceOptions:
    max_tasks: int = 0
    """Stop after finishing this many tasks in this run (0: run until stopped)."""
    task_id: int = 0
    """Join only this task (0: any open task this worker fits)."""
    declare_slowdown: float = 1.0
    """Present this machine as this many times slower: fewer declared steps and samples per second."""
    step_delay: float = 0.0
    """Seconds slept after each inner step, emulating a slower device (tests, localnet)."""
    cheat: str = ""
    """TEST SWITCH: play every round with this cheat from `compute.cheats` ('': train honestly)."""
    kernel: str = TORCH_KERNEL
    """What trains its rounds (`compute.wasm.trainer.trainer_for`): `torch` under its CPU or GPU profile, or
    `wasm32`, the browser worker's kernel under wasmtime (the same bytes a tab makes); it joins only tasks whose
    spec allows it."""
    poll_interval: float = 0.5
    linger: float = 0.0
    """Seconds to keep serving blobs (final weights...) after the last of `max_tasks` tasks ends."""
    keep_blobs: bool = False
    """Keep a finished task's checkpoints, updates and round weights (default: delete them, `housekeeping.py`)."""
    rich_output: bool = False
    device: str | None = None
    """Where the trainer runs: cpu, cuda or cuda:N (None: CUDA where present, `devices.training_device`)."""
    memory_limit_mb: int = 0
    """Declare at most this much memory (0: what `preflight.measure` found); it can only lower the measurement."""
    metrics_address: str = ""
    """Where `start` serves this worker's Prometheus metrics (HOST:PORT; '' or '0': nowhere)."""
    metrics_port_in_use: str = CONTINUE
    """That address taken: `continue` without metrics, or `refuse` to start (`wallet/metrics_endpoint.py`)."""

    def __post_init__(self) -> None:
        if self.declare_slowdown < 1.0:
            raise WorkerError(f"--declare-slowdown must be at least 1, got {self.declare_slowdown}")
        if self.kernel not in KERNELS:
            raise WorkerError(f"--kernel must be one of {', '.join(KERNELS)}, got {self.kernel!r}")
        if min(self.step_delay, self.linger, self.max_tasks, self.task_id) < 0 or self.poll_interval <= 0:
            raise WorkerError("step delay, linger, max tasks and task id must be non-negative, the poll interval positive")


@dataclasses.dataclass
class TaskContext:
    """What a task needs in memory while the worker works on it."""

    progress: TaskProgress
    spec: TaskSpec
    dataset: Dataset
    trainer: Trainer
    weights: WeightsFollower
    last_reason: str = ""
    samples_per_second: float | None = None
    """This task's training pace on this machine as the last round measured it (step delay included)."""


class WorkerService:
    def __init__(self, home: pathlib.Path, config: WorkerConfig, key: PrivateKey, options: ServiceOptions,
                 market: MarketClient | None = None) -> None:
        """`market` defaults to a `MarketClient` on `config.node`; tests pass one over an in-process chain."""
        self.home = home
        self.metrics = WorkerMetrics()
        """What this worker did (`metrics.py`), served at `options.metrics_address` from `start` on."""
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.config = config
        self.options = options
        self.strategy = TrainingStrategy(options.step_delay)
        self.cheat = get_cheat(options.cheat) if options.cheat else None
        """TEST SWITCH: the cheat that plays this worker's rounds (`cheat_round.py`), None for an honest worker."""
        self.state = WorkerState.load(home)
        self.store = BlobStore(home / "blobs")
        self.server = BlobServer(self.store, owner_token="", host=config.blob_host, port=config.blob_port)
        self.relay = RelayPusher(config.relay, key, self.store) if config.relay else None
        """Where this worker publishes its blobs when it cannot be reached (`relay` in worker.json), serving
        none itself; None: its blob service serves them."""
        self.market = market or MarketClient(AsyncRpcClient(config.node), key, home, config.fee)
        self.committer = Committer(self.market, self.state, self._sleep)
        self.clock = BlockClock()
        self.addresses = AddressPolicy(allow_private=config.allow_private_blob_hosts)
        """Where blob fetches may connect (compute/blobs/connect_policy.py): blob URLs come from strangers."""
        self.acceleration = Acceleration(config.acceleration)
        """Batches drawn ahead, the checkpoint process, the training core: handed to every round."""
        self.residuals = ResidualStore(self.acceleration)
        """The error-feedback residuals being stored, one after the other."""
        self.preflight: Preflight | None = None
        """This machine measured at start (`preflight.measure`): what is registered and what tasks must fit."""
        self.finished_this_run = 0
        self.unfit: set[int] = set()
        self._stopping = asyncio.Event()
        self._stop_training = threading.Event()

    @property
    def address(self) -> str:
        return self.market.address

    @property
    def blob_url(self) -> str:
        """What others fetch from: the configured public URL, else where the blob service listens."""
        if self.relay is not None:
            return ""  # the relay serves this worker's blobs (its `relay` on chain)
        return self.config.public_url.rstrip("/") or self.server.url

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        require_replayable_process()  # before anything is served, registered or staked
        try:
            self.metrics_endpoint = start_metrics_endpoint(self.options.metrics_address, self.metrics.registry,
                                                           "the worker", self.options.metrics_port_in_use)
        except MetricsEndpointError as error:
            raise WorkerError(str(error)) from None
        if self.relay is not None:
            log.info("worker %s publishing its blobs through the relay %s (no blob service of its own)",
                     self.address, self.config.relay)
        else:
            await self._serve_blobs()
        if self.cheat is not None:
            log.warning("TEST SWITCH --cheat %s: this worker trains dishonestly and will be slashed", self.cheat.name)
        await self._measured()
        log.info("measured %.0f samples/s on the reference MLP on %s, %d MiB, %d cores (declaring %s)",
                 self.preflight.samples_per_second, self.preflight.device, self.preflight.device_memory_mb,
                 self.preflight.cores, describe_hardware(self._hardware()))
        while not self._stopping.is_set():
            try:
                await self._register()
                return
            except (NodeUnreachable, InsufficientBalance, RpcError, QueryFailed) as error:
                # A supervisor may start workers before the node (or its app) is up or the account is funded.
                log.warning("cannot register yet: %s; retrying in 2 s", error)
                await self._sleep(2.0)

    async def _serve_blobs(self) -> None:
        try:
            await self.server.start()
        except OSError as error:
            raise WorkerError(f"cannot serve blobs on {self.server.url}: {error.strerror or error} "
                              f"(is another worker using this home's port? see worker.json)") from None
        log.info("worker %s serving blobs at %s (registered as %s)", self.address, self.server.url, self.blob_url)

    async def stop(self) -> None:
        self._stopping.set()
        self._stop_training.set()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
            self.metrics_endpoint = None
        await self.server.stop()
        if self.relay is not None:
            await self.relay.close()
        await self.market.close()
        await asyncio.to_thread(self.residuals.close)
        await asyncio.to_thread(self.acceleration.close)

    def request_stop(self) -> None:
        """Ask `run` to return soon (from a signal handler): training stops at the next segment boundary."""
        self._stopping.set()
        self._stop_training.set()

    async def _sleep(self, seconds: float | None = None) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds or self.options.poll_interval)
        except asyncio.TimeoutError:
            pass

    async def _measured(self) -> Preflight:
        """This machine as `preflight.measure` finds it, measured once (at start, or before the first fit check)."""
        if self.preflight is None:
            self.preflight = await asyncio.to_thread(measure, self.home, self.options.device)
        return self.preflight

    def _hardware(self):
        """The hardware record registered on chain: measured at start, the memory lowered by the option only."""
        return self.preflight.hardware(self.options.declare_slowdown, self.options.memory_limit_mb)

    async def _register(self) -> None:
        record = await self.market.worker()
        await self._measured()
        hardware = self._hardware()
        if record is not None and record.relay != self.config.relay:  # moved behind a relay, or back
            await self.market.update(hardware, self.blob_url, self.config.relay)
            log.info("updated the registered relay to %s", self.config.relay or "none (serving blobs itself)")
            return
        if record is None:
            stake = self.config.stake or (await self.market.params()).min_worker_stake
            outcome = await self.market.register(stake, hardware, self.blob_url, self.config.relay)
            log.info("registered as a worker with stake %d utrl (block %d)", stake, outcome.included.height)
        elif record.blob_url != self.blob_url or measured_differently(record.hardware, hardware):
            await self.market.update(hardware, self.blob_url, self.config.relay)
            log.info("updated the registered blob URL (%s) and hardware (%s)", self.blob_url,
                     describe_hardware(hardware))
        else:
            log.info("already registered (stake %s utrl, earned %s utrl)", record.stake, record.earned)
        if record is not None:
            self.metrics.earned.set(record.earned)

    # ---- the main loop ------------------------------------------------------------------------------------

    async def run(self) -> None:
        adopted = False
        while not self._stopping.is_set():
            if self.options.max_tasks and self.finished_this_run >= self.options.max_tasks:
                if self.options.linger:
                    log.info("finished %d task(s); serving blobs for %g s more", self.finished_this_run,
                             self.options.linger)
                    await self._sleep(self.options.linger)
                log.info("finished %d task(s); stopping", self.finished_this_run)
                return
            try:
                if not adopted:
                    await self.adopt_joined_tasks()
                    adopted = True
                active = self.state.active_tasks()
                if active:
                    await self.work_on(active[0])
                elif not await self.find_and_join():
                    await self._sleep()
            except RoundInterrupted as interrupted:
                log.info("%s; progress saved", interrupted)
                return
            except (NodeUnreachable, InclusionTimeout, RpcError, QueryFailed) as error:
                # The node restarting or catching up: unreachable, or answering JSON-RPC internal error -32603
                # while its ABCI app is down under a running engine or CometBFT. The saved progress carries on.
                unexpected = isinstance(error, RpcError) and error.code != INTERNAL_RPC_ERROR
                log.log(logging.ERROR if unexpected else logging.WARNING, "%s; retrying", error)
                await self._sleep(2.0)
            except DataKeyWaiting as waiting:
                log.info("%s; looking again in 2 s", waiting)
                await self._sleep(2.0)
            except (WeightsMismatch, StartUnavailable, BlobError, DatasetError) as error:
                # An update nobody serves, a dataset that cannot be fetched: retry; if the round's deadline passes
                # first, the chain drops this worker from the task and the next look at it says so.
                log.error("%s; retrying in 5 s", error)
                await self._sleep(5.0)

    async def adopt_joined_tasks(self) -> None:
        """Take up tasks the chain says this worker belongs to but the saved state does not know: a worker
        killed between its join being included and the state being saved must still train them."""
        record = await self.market.worker()
        for task_id in record.tasks if record is not None else ():
            if task_id in self.state.tasks:
                continue
            view = await self.market.task(task_id)
            member = view.member(self.address)
            if member is not None and member.status == plan.ACTIVE:
                self.state.add_task(task_id, view.spec_hash, member.index)
                log.info("task %d: found on chain as worker %d (joined before the last restart)", task_id,
                         member.index)

    async def find_and_join(self) -> bool:
        """Join one task this worker fits, open or running with a slot open to a replacement; True if it joined."""
        for summary in await self.market.live_tasks():
            task_id = summary.id
            if (not plan.takes_workers(summary) or task_id in self.state.tasks or task_id in self.unfit
                    or (self.options.task_id and task_id != self.options.task_id)):
                continue
            try:
                if summary.status == plan.RUNNING:  # a replacement: dataset and start weights before any collateral
                    await prepare_replacement(self.market, self.store, task_id, summary.spec_hash, self.addresses)
                await self._check_fit(task_id, summary)
            except (TaskUnfit, SpecError) as reason:
                log.info("task %d does not fit this worker: %s", task_id, reason)
                self.unfit.add(task_id)
                continue
            except StartUnavailable as error:
                log.warning("task %d: not joining as a replacement, no collateral locked: %s", task_id, error)
                continue
            try:
                await self.market.join(task_id)
            except TxRejected as error:
                log.info("could not join task %d: %s", task_id, error.log)
                continue
            member = (await self.market.task(task_id)).member(self.address)
            self.state.add_task(task_id, summary.spec_hash, member.index)
            log.info("joined task %d as worker %d (collateral %d utrl locked)", task_id, member.index,
                     summary.collateral)
            return True
        return False

    async def _check_fit(self, task_id: int, summary: TaskSummary) -> TaskSpec:
        raw = await self.market.spec(task_id)
        if hashlib.sha256(raw).hexdigest() != summary.spec_hash:
            raise TaskUnfit("the spec does not match its hash on chain")
        spec = parse_spec(raw)
        if self.options.kernel not in spec.kernels:
            raise TaskUnfit(f"this worker trains with the {self.options.kernel} kernel; the task's spec allows "
                            f"{', '.join(spec.kernels)} (determinism.kernels)")
        # memory, cores, instruction set, a pinned pretrained model this machine lacks: refused before joining
        measured = await self._measured()
        replayed = await self.market.replayed_gpus() if measured.gpu_profile else None
        unfit = unfit_reasons(measured, raw, self.options.memory_limit_mb, replayed)
        if unfit:
            raise TaskUnfit("; ".join(unfit))
        if summary.collateral > await self.market.balance():
            raise TaskUnfit(f"the collateral {summary.collateral} utrl exceeds this worker's balance")
        try:  # the dataset, before any collateral is locked: one nobody serves keeps this worker out
            manifest = await read_manifest(self.store, spec, self.addresses)
            record = await self.market.worker()
            check_memory(raw, record.hardware.memory_mb if record is not None else 0, loaded_bytes(manifest))
            check_disk(missing_bytes(self.store, manifest), shutil.disk_usage(self.store.root).free)
            await obtain_blobs(self.store, spec, self.addresses)  # a private one as ciphertext: no key before joining
        except (DatasetError, BlobError) as error:
            raise TaskUnfit(f"the task's dataset cannot be obtained: {error}") from None
        return spec

    async def work_on(self, progress: TaskProgress) -> None:
        """Work on one task until this worker is done with it (or the service stops)."""
        context = await self.prepare(progress)
        if context is None:
            return
        try:
            while not self._stopping.is_set() and await self.step(context):
                pass
        finally:
            await asyncio.to_thread(context.trainer.close)  # its checkpoint process, once what it stores is stored

    async def prepare(self, progress: TaskProgress) -> TaskContext | None:
        """Spec (as on chain), dataset and trainer of a task this worker belongs to; None when it is a private
        task this worker is done with before its data key came (then finished here, `data_key`)."""
        raw = await self.market.spec(progress.task_id)
        if hashlib.sha256(raw).hexdigest() != progress.spec_hash:
            raise TaskUnfit(f"task {progress.task_id}'s spec no longer matches the hash it was joined with")
        spec = parse_spec(raw)
        key = None
        if is_private(await read_manifest(self.store, spec, self.addresses)):
            key = await self.data_key(progress)
            if key is None:
                return None
        dataset = await obtain_dataset(self.store, spec, self.addresses, key)
        weights = WeightsFollower(spec, dataset.shape, self.addresses, store=self.store,
                                  cache=ProgressCache(self.store, self.state, progress))
        trainer = await asyncio.to_thread(trainer_for, on_device(spec, (await self._measured()).device), dataset,
                                          self.options.kernel)
        return TaskContext(progress, spec, dataset, trainer, weights)

    async def data_key(self, progress: TaskProgress) -> bytes | None:
        """A private task's data key, once the requester delivered it to this worker (after the start). Until then
        it waits (`DataKeyWaiting`, retried by `run`): if the key does not come in time the chain releases this
        worker without penalty. A bad box is reported on chain (`MsgReportBadKey`, which releases it, compensated)
        and the task finished here. None when this worker is done with the task (released, or the task ended)."""
        view = await self.market.task(progress.task_id)
        member = view.member(self.address)
        if view.status not in LIVE_STATUSES or member is None or member.status != plan.ACTIVE:
            self._finish(progress, view, f"{view.status} before its data key came"
                         + (f" ({member.reason})" if member is not None and member.reason else ""))
            return None
        try:
            key = await received_data_key(self.market.rpc, progress.task_id, self.market.key, view.data_key_hash)
        except BadDataKey as bad:
            if not bad.reported:
                outcome = await self.market.send(bad_key_report(progress.task_id, self.market.key, bad.sealed))
                log.warning("task %d: %s; reported on chain in block %d: released without penalty",
                            progress.task_id, bad, outcome.included.height)
            self._finish(progress, await self.market.task(progress.task_id), "bad data key, reported")
            return None
        if key is None:
            raise DataKeyWaiting(f"task {progress.task_id}: waiting for the requester to deliver this worker's "
                                 f"data key (released without penalty if it does not come in time)")
        return key

    async def step(self, context: TaskContext) -> bool:
        """Look at the chain once and do what it calls for; False once this worker is done with the task."""
        task_id = context.progress.task_id
        view = await self.market.task(task_id)
        self.clock.observe(await self.market.height())
        action = plan.decide(view, self.address)
        if action.kind == plan.FINISH:
            self._finish(context.progress, view, action.reason)
            return False
        if action.kind == plan.TRAIN:
            await self.work_round(context, view, action.round)
        elif action.kind == plan.REPORT_FINAL:
            await self.report_final(context, view)
        else:
            if action.reason != context.last_reason:
                log.info("task %d: %s", task_id, action.reason)
                context.last_reason = action.reason
            if action.mirror_round >= 0:
                await context.weights.mirror(round_updates(view, action.mirror_round))
            await self._sleep()
        return True

    def _finish(self, progress: TaskProgress, view: TaskView, reason: str) -> None:
        member = view.member(self.address)
        paid, rounds_passed, slashed, penalized = ((member.paid, member.rounds_passed, member.slashed, member.penalized)
                                                   if member is not None else (0, 0, 0, 0))
        log.info("task %d: done (%s); paid %s utrl for %s verified round(s), slashed %s, penalized %s",
                 progress.task_id, reason, paid, rounds_passed, slashed, penalized)
        if view.final_weights_hash:
            log.info("task %d: final weights %s", progress.task_id, view.final_weights_hash)
        self.state.finish_task(progress.task_id, reason)
        self.metrics.earnings.inc(paid)
        self.finished_this_run += 1
        if not self.options.keep_blobs:
            deleted, freed = prune_task(self.store, self.state, progress.task_id, self.residuals)
            log.info("task %d: deleted %d round blob(s), %.1f MB (final weights kept)", progress.task_id, deleted,
                     freed / 1e6)

    # ---- rounds -------------------------------------------------------------------------------------------

    async def global_state(self, context: TaskContext, view: TaskView, round_index: int) -> GlobalState:
        """W_r and the outer momentum, as the task's weights follower derives them: saved with the progress,
        else from W_{r-1} and round r-1's verified updates (fetched from any member that has them, retried
        for half a minute while members still upload them)."""
        follower, task_id = context.weights, context.progress.task_id
        derived_before = follower.cache.load(round_index) is not None
        for attempt in range(30):
            try:
                state = await follower.state(round_index, view)
                break
            except StartUnavailable as error:
                if attempt == 29:
                    raise
                if attempt == 0:
                    log.warning("task %d: %s; retrying", task_id, error)
                await self._sleep(1.0)
        if round_index > 0 and not derived_before:
            previous = follower.cache.load(round_index - 1)
            disagreement = follower.disagreement(previous, view) if previous is not None else ""
            if disagreement:
                log.error("task %d: %s", task_id, disagreement)
            passed = sum(1 for u in round_updates(view, round_index - 1) if u.outcome == PASSED)
            log.info("task %d: W_%d from %d verified update(s) of round %d", task_id, round_index, passed,
                     round_index - 1)
        return state

    async def report_quality(self, context: TaskContext, state: GlobalState) -> None:
        """Log the test loss and accuracy of the global weights W_r (the round's trainer is reloaded before
        training, so evaluating with it changes nothing)."""
        trainer = context.trainer

        def evaluate_weights() -> tuple[float, float | None]:
            trainer.load(TrainingState.fresh(state.weights))
            return evaluate(trainer.model, context.dataset)

        loss, accuracy = await asyncio.to_thread(evaluate_weights)
        shown = "" if accuracy is None else f", accuracy {100 * accuracy:.2f}%"  # regression: the loss alone
        log.info("task %d: W_%d test loss %.4f%s", context.progress.task_id, state.round, loss, shown)

    def _seconds_left(self, view: TaskView) -> float | None:
        per_block = self.clock.seconds_per_block()
        if per_block is None or self.clock.last is None:
            return None
        return max(0.0, (view.phase_deadline - self.clock.last[1]) * per_block)

    async def work_round(self, context: TaskContext, view: TaskView, round_index: int) -> None:
        """Round `round_index` of the task: plan (or resume) it, train it and encode the update beside its last
        checkpoint, then publish its checkpoints and commit (a saved commitment is sent again instead), unless
        the worker is no longer an active member by then (it left or was dropped meanwhile)."""
        task_id = context.progress.task_id
        if self.committer.pending(task_id, round_index):
            await self.committer.resend(task_id, round_index)
            return
        state = await self.global_state(context, view, round_index)
        await self._plan_round(context, view, round_index, state)
        trained = await self._train_round(context, round_index, state)
        after = plan.decide(await self.market.task(task_id), self.address)
        if after.kind == plan.FINISH:  # left (`trolly-worker leave`) or dropped while it trained: nothing to commit
            log.info("task %d round %d: trained but not committed (%s)", task_id, round_index, after.reason)
            return
        await self._commit_round(context, round_index, state, trained)

    async def _plan_round(self, context: TaskContext, view: TaskView, round_index: int, state: GlobalState) -> None:
        """A new round: how many steps fit its commit window at this worker's pace. A started one: check that it
        was started from W_r, and say where it resumes."""
        progress, spec = context.progress, context.spec
        task_id = progress.task_id
        round_progress = progress.round(round_index)
        if not round_progress.steps:
            await self.report_quality(context, state)
            batch = spec.training.batch_size
            samples_per_second = context.samples_per_second
            if samples_per_second is None:  # no round trained yet: a short measurement of the task's own step
                speed = await asyncio.to_thread(measure_trainer, context.trainer)
                # an emulated slow device (step delay) is as slow as it sleeps: plan with its real pace
                samples_per_second = batch / (batch / speed.samples_per_second + self.options.step_delay)
            steps = plan_steps(spec.training.inner_steps, batch, samples_per_second, self._seconds_left(view),
                               self.options.declare_slowdown)
            # Saved with checkpoint 0's record, beside the first steps, with the start weights' hash: a restart
            # before that finds no checkpoint and plans the round anew, which loses nothing.
            round_progress.steps = steps
            log.info("task %d round %d: training %d of %d inner steps (%.0f samples/s measured)", task_id,
                     round_index, steps, spec.training.inner_steps, samples_per_second)
        elif round_progress.start_weights_hash and round_progress.start_weights_hash != state.weights_hash().hex():
            raise WeightsMismatch(f"task {task_id} round {round_index} was started from {round_progress.start_weights_hash}"
                                  f" but W_{round_index} is now {state.weights_hash().hex()}: the saved state is damaged")
        elif round_progress.checkpoints:
            log.info("task %d round %d: resuming from checkpoint %d of %d", task_id, round_index,
                     len(round_progress.checkpoints) - 1, spec.num_checkpoints(round_progress.steps) - 1)

    async def _train_round(self, context: TaskContext, round_index: int, state: GlobalState) -> TrainedRound:
        """Train the round (`rounds.train_round`, with this worker's acceleration), its update encoded beside
        the storing of its last checkpoint; the pace measured for the next round's plan."""
        progress = context.progress
        round_progress = progress.round(round_index)
        if self.cheat is not None:
            try:
                return await asyncio.to_thread(
                    play_cheat_round, self.cheat, context.trainer, self.store, self.state, progress, round_index,
                    start_weights=state.weights,
                    previous_residual_hash=previous_residual(progress.rounds, round_index, self.residuals))
            except CheatError as error:
                log.warning("task %d round %d: trained honestly, the cheat cannot play it: %s", progress.task_id,
                            round_index, error)
        display = RoundDisplay(self.options.rich_output)
        display.begin(progress.task_id, round_index, 0, round_progress.steps)

        def encode_beside_storing(end_weights, checkpoints_stored) -> None:  # beside the last checkpoint's storing
            if not round_progress.update_hash:
                encode_update(context.trainer, self.store, round_progress, state.weights,
                              previous_residual(progress.rounds, round_index, self.residuals), end_weights,
                              residuals=self.residuals, state=self.state, residual_after=checkpoints_stored)

        began = time.perf_counter()
        try:
            trained = await asyncio.to_thread(
                train_round, context.trainer, self.strategy, self.store, self.state, round_progress,
                worker_index=progress.worker_index, start_weights=state.weights, acceleration=self.acceleration,
                stop=self._stop_training, on_segment=display.advance, while_storing=encode_beside_storing)
        finally:
            display.end()
        seconds = time.perf_counter() - began
        if context.trainer.samples:  # the next round plans with this one's pace, checkpoints and encoding included
            context.samples_per_second = context.trainer.samples / seconds
        self.metrics.round_trained(seconds, context.trainer.samples)
        return trained

    async def _commit_round(self, context: TaskContext, round_index: int, state: GlobalState,
                            trained: TrainedRound) -> None:
        """Once the update and its residual are recorded, publish the round's checkpoints and commit."""
        progress = context.progress
        task_id = progress.task_id
        round_progress = progress.round(round_index)
        # The commitment names the residual too (verifiers recompute the update from it): wait until it is
        # stored; one never recorded (a restart in between, a failed store) is encoded again, to the same bytes.
        await asyncio.to_thread(self.residuals.wait)
        if not round_progress.update_hash or not round_progress.residual_hash:
            _, residual_stored = await asyncio.to_thread(
                encode_update, context.trainer, self.store, round_progress, state.weights,
                previous_residual(progress.rounds, round_index, self.residuals), trained.end_weights,
                residuals=self.residuals, state=self.state)
            await asyncio.wrap_future(residual_stored)
        self.store.set_checkpoints(task_id, round_index, trained.checkpoints)
        if self.relay is not None:  # on the relay before the commitment names them: verifiers fetch once it lands
            await self.relay.push_round(task_id, round_index, trained.checkpoints,
                                        [round_progress.update_hash, round_progress.residual_hash])
        message = commitment(task_id, round_progress, context.spec.training.batch_size, context.trainer.profile_id,
                             trained.claimed_samples)
        await self.committer.commit(task_id, round_index, message)
        self._count_published([*trained.checkpoints, round_progress.update_hash, round_progress.residual_hash])

    async def report_final(self, context: TaskContext, view: TaskView) -> None:
        progress = context.progress
        rounds = view.rounds
        if self.committer.pending(progress.task_id, rounds):
            await self.committer.resend(progress.task_id, rounds)
            return
        state = await self.global_state(context, view, rounds)
        await self.report_quality(context, state)
        digest = self.store.put(encode_weights(state.weights))
        if self.relay is not None:
            await self.relay.push_blobs(progress.task_id, rounds, [digest])  # the final report's round
        with self.state.lock:
            progress.final_weights_hash = digest
            self.state.save()
        log.info("task %d: final weights W_%d published as blob %s", progress.task_id, rounds, digest)
        reported = digest
        if self.cheat is not None and self.cheat.final is not None:  # TEST SWITCH: a forged final report
            reported = self.cheat.final(bytes.fromhex(digest)).hex()
            log.warning("task %d: reporting forged final weights %s (TEST SWITCH)", progress.task_id, reported)
        await self.committer.commit(progress.task_id, rounds, final_report(progress.task_id, rounds, reported))
        self._count_published([digest])

    def _count_published(self, digests: list[str]) -> None:
        """Add the bytes of the blobs a commitment just made public to `trolly_worker_published_bytes`."""
        self.metrics.bytes_published.inc(sum(self.store.path(digest).stat().st_size for digest in digests
                                              if self.store.has(digest)))
