"""Shared by the worker tests: `ChainMarket`, the worker's market calls answered by an in-process chain
(`chain_helpers.Chain`), a small task spec, a service built as a freshly started process would be, and a task
of several such services driven to its end (registered, joined, stepped in turn while the chain moves on)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
from typing import Awaitable, Callable

from market_helpers import MARKET_PARAMS, Market

from trolly.chain.crypto import encode_address
from trolly.chain.errors import NotFound
from trolly.chain.market.params import MarketParams
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.tx import decode_tx, tx_hash
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import example_spec, parse_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.compute.worker.config import WorkerConfig
from trolly.compute.worker.service import ServiceOptions, WorkerService
from trolly.wallet.errors import NodeUnreachable, TxRejected
from trolly.wallet.market_answers import parse_answer
from trolly.wallet.market_views import ReplayGpus, SampledSegment, TaskPage, TaskView, WorkerView
from trolly.wallet.rpc import TxResult
from trolly.wallet.sender import SendOutcome
from whole_task import whole_task

ROUNDS = 2
STEPS = 8


class SimulatedKill(BaseException):
    """Stands for SIGKILL: nothing in the service may catch it."""


class ChainMarket:
    """The MarketClient calls of the worker, over the in-process chain; one block per broadcast."""

    def __init__(self, chain, key) -> None:
        self.chain = chain
        self.key = key
        self.address = encode_address(key.address)
        self.broadcasts: list[bytes] = []
        self.kill = ""  # "before" or "after" (inclusion) on the next broadcast
        self.outages = 0  # the next `outages` task queries find the node unreachable
        self.auto_blocks = False  # a block passes before each task query (time goes by on its own)

    async def task(self, task_id):
        if self.outages:
            self.outages -= 1
            raise NodeUnreachable("http://127.0.0.1:26657", "connection refused")
        if self.auto_blocks:
            self.chain.advance(1)
        return TaskView.from_answer(whole_task(self.chain.query, task_id))

    async def height(self):
        return self.chain.height

    async def spec(self, task_id):
        return self.chain.query(f"/market/spec/{task_id}")["spec"].encode()

    async def sign(self, message):
        return self.chain.tx(self.key, message)

    async def broadcast(self, raw, timeout=60.0):
        self.broadcasts.append(raw)
        kill, self.kill = self.kill, ""
        if kill == "before":
            raise SimulatedKill()
        result = self.chain.block(raw).tx_results[0]
        if kill == "after":
            raise SimulatedKill()
        if not result.ok:
            raise TxRejected(result.code, result.codespace, result.log)
        digest = tx_hash(raw).hex().upper()
        return SendOutcome(digest, decode_tx(raw).body.nonce,
                           TxResult(digest, self.chain.height, 0, 0, "", "", (), raw))

    async def find_tx(self, raw):
        return None

    async def live_tasks(self):
        return list(TaskPage.from_answer(self.chain.query("/market/tasks/open")).tasks)

    async def params(self):
        return parse_answer(MarketParams, self.chain.query("/market/params"), "/market/params")

    async def replayed_gpus(self):
        return ReplayGpus.from_answer(self.chain.query("/market/replay_gpus")).replayed()

    async def balance(self):
        return self.chain.balance(self.key)

    async def worker(self):
        try:
            return WorkerView.from_answer(self.chain.query(f"/market/worker/{self.address}")).record
        except NotFound:
            return None

    async def send(self, *messages):
        return await self.broadcast(self.chain.tx(self.key, *messages))

    async def register(self, stake, hardware, blob_url, relay=""):
        return await self.send(pb.MsgRegisterWorker(stake=stake, hardware=hardware, blob_url=blob_url, relay=relay))

    async def update(self, hardware, blob_url, relay=""):
        return await self.send(pb.MsgUpdateWorker(hardware=hardware, blob_url=blob_url, relay=relay,
                                                  clear_relay=not relay))

    async def join(self, task_id):
        return await self.send(pb.MsgJoinTask(task_id=task_id))

    async def nonce(self):
        return self.chain.nonce(self.key)

    async def close(self):
        pass


def spec_document(manifest_hash: str, **overrides) -> bytes:
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}}, codec="int8",
                            training={"rounds": ROUNDS, "inner_steps": STEPS, "batch_size": 8, "checkpoint_every": 4,
                                      "seed": 11})
    document.update(overrides)
    return json.dumps(document).encode()


def joined_task(make_chain, dataset_blobs):
    """A chain with one registered worker that has joined a fresh task: (chain, market, task_id, spec)."""
    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    market.register(market.workers[:1])
    spec = spec_document(dataset_blobs.manifest_hash)
    task_id = market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), workers=1, rounds=ROUNDS,
                            samples_per_worker=1, round_blocks=20)
    market.join(task_id, market.workers[:1])
    return chain, market, task_id, spec


def reference_round(steps: int, hidden: int, seed: int, worker_index: int):
    """A digits MLP task of `steps` inner steps and a checkpoint every 5, its dataset, W_0 and round 0 trained from
    it by `worker_index` without the worker's machinery: (spec, dataset, start, reference)."""
    blobs = build_dataset("digits")
    spec = spec_from_dict(example_spec(
        blobs.manifest_hash, model={"arch": "mlp", "config": {"hidden": [hidden]}}, codec="int8",
        training={"rounds": 2, "inner_steps": steps, "batch_size": 8, "checkpoint_every": 5, "seed": seed}))
    dataset = dataset_from_blobs(blobs)
    start = initial_weights(spec, dataset.shape)
    return spec, dataset, start, run_round(Trainer(spec, dataset), start, worker_index=worker_index, round_index=0,
                                           steps=steps)


def new_service(home, chain, key, cheat: str = "") -> WorkerService:
    """A service as a freshly started process would build it: state from disk, nothing in memory."""
    return WorkerService(home, WorkerConfig(key_name="worker", blob_port=0, allow_private_blob_hosts=True), key,
                         ServiceOptions(poll_interval=0.01, cheat=cheat), market=ChainMarket(chain, key))


async def judge_as_a_validator(item: dict, spec, dataset, replayer, market, task_id: int, weights):
    """What a validator's verifier reports on one item of `/market/verify`: a training segment replayed from
    what its worker serves, or a final report against the W_R that `weights` (a WeightsFollower over the
    members' blob services) derives, as the verifier service does."""
    from trolly.compute.blobs import AddressPolicy, BlobClient
    from trolly.verifier.final_report import verify_final_report
    from trolly.verifier.segment_check import SegmentClaim, verify_segment

    claim = SegmentClaim.from_segment(SampledSegment.from_answer(item))
    view = TaskView.from_answer(market.task(task_id))
    if claim.round == view.rounds:
        return verify_final_report(claim, (await weights.state(claim.round, view)).weights_hash())
    async with BlobClient([claim.blob_url], address_policy=AddressPolicy(allow_private=True)) as source:
        return await verify_segment(claim, spec, dataset, source, replayer)


def new_services(root, chain, keys, cheats: tuple[str, ...] = ()) -> list[WorkerService]:
    """One fresh service per key, each in its own home `root/worker-<index>`; `cheats[index]` played by that one."""
    services = []
    for index, key in enumerate(keys):
        home = root / f"worker-{index}"
        home.mkdir()
        services.append(new_service(home, chain, key, cheat=cheats[index] if index < len(cheats) else ""))
    return services


@contextlib.asynccontextmanager
async def serving(services):
    """Every service's blob service started; all of them stopped on the way out, whatever happened."""
    try:
        for service in services:
            await service.server.start()
        yield
    finally:
        for service in services:
            await service.server.stop()


async def register_and_join(market, services, spec: bytes, members: int | None = None, samples_per_worker: int = 1,
                            memory_mb: int = 0) -> tuple[int, list]:
    """Registers every service's worker with its (started) blob service's URL in one block, submits a task of
    `members` workers (all of them by default) for the spec's rounds and has the first `members` join it: the
    task id and each member's prepared context, as after a successful join."""
    keys = [service.market.key for service in services]
    output = market.chain.block(*[market.chain.tx(key, pb.MsgRegisterWorker(
        stake=2_000_000, blob_url=service.server.url,
        hardware=pb.HardwareProfile(device="cpu", samples_per_second=100, memory_mb=memory_mb, threads=1)))
        for key, service in zip(keys, services)])
    assert all(r.ok for r in output.tx_results)
    members = members or len(services)
    task_id = market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), workers=members,
                            rounds=json.loads(spec)["training"]["rounds"], samples_per_worker=samples_per_worker,
                            round_blocks=20)
    market.join(task_id, keys[:members])
    contexts = []
    for index, service in enumerate(services[:members]):
        service.state.add_task(task_id, hashlib.sha256(spec).hexdigest(), index)
        contexts.append(await service.prepare(service.state.task(task_id)))
    return task_id, contexts


async def step_until_the_first_is_done(services, contexts, between: Callable[[list[bool]], Awaitable[None]],
                                       turns: int = 100) -> None:
    """Steps every live service once a turn (an exception out of any worker's step fails the test), then lets
    `between(alive)` move the chain on, until the first service is done with the task; fails after `turns`."""
    alive = [True] * len(services)
    for _ in range(turns):
        for index, service in enumerate(services):
            if alive[index] and not await service.step(contexts[index]):
                alive[index] = False
        if not alive[0]:
            return
        await between(alive)
    raise AssertionError("the task did not finish")


def expected_final_weights(spec, dataset) -> str:
    """The hash of the weights after ROUNDS verified rounds of worker 0's updates alone, computed independently."""
    codec = get_codec(spec.codec)
    feedback = ErrorFeedback(codec)
    state = GlobalState.initial(initial_weights(spec, dataset.shape))
    for round_index in range(ROUNDS):
        result = run_round(Trainer(spec, dataset), state.weights, worker_index=0, round_index=round_index, steps=STEPS)
        update = WorkerUpdate(0, result.samples_processed, codec.decode(feedback.encode(result.pseudo_gradient)[0]))
        state = outer_step(state, [update], spec.training.outer_optimizer)
    return state.weights_hash().hex()


@dataclasses.dataclass
class JudgedTask:
    """A task an honest worker (index 0) and a cheating one trained to its end, judged by a validator's verifier."""

    market: Market
    task_id: int
    spec: object  # the parsed TaskSpec
    dataset: object
    services: list[WorkerService]
    reports: dict[str, list]  # the verifier's SegmentReports by worker address

    @property
    def honest(self) -> str:
        return self.services[0].address

    @property
    def cheater(self) -> str:
        return self.services[1].address

    def settled(self) -> dict:
        """The task's view, once checked completed: the cheater slashed and unpaid, the honest worker paid for
        every round, the final weights built from the honest updates alone."""
        view = self.market.task(self.task_id)
        assert view["status"] == "completed"
        members = {m["worker"]: m for m in view["members"]}
        cheater, honest = members[self.cheater], members[self.honest]
        assert cheater["status"] == "slashed" and cheater["slashed"] > 0 and cheater["paid"] == 0
        assert honest["rounds_passed"] == ROUNDS and honest["paid"] > 0
        assert view["final_weights_hash"] == expected_final_weights(self.spec, self.dataset)
        return view


def honest_and_cheating_task(make_chain, root, cheat: str) -> JudgedTask:
    """Two worker services, the second playing `cheat`, train a digits task on the in-process chain and serve
    their blobs from real blob services on 127.0.0.1; the first validator's verifier judges every sampled
    segment from what they serve (deriving each start itself) and votes, until the honest worker is done."""
    from trolly.compute.blobs import AddressPolicy
    from trolly.compute.weights_follower import WeightsFollower
    from trolly.verifier import evidence, segment_check

    blobs = build_dataset("digits")
    dataset = dataset_from_blobs(blobs)
    spec_bytes = spec_document(blobs.manifest_hash)
    spec = parse_spec(spec_bytes)
    chain = make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    services = new_services(root, chain, market.workers[:2], cheats=("", cheat))
    replayer = segment_check.Replayer()
    weights = WeightsFollower(spec, dataset.shape, AddressPolicy(allow_private=True))  # the validator's own W_r
    reports: dict[str, list] = {}
    operator = chain.operators[0]

    async def verify_pending(task_id: int) -> None:
        txs = []
        for item in market.to_verify(operator):
            claim = segment_check.SegmentClaim.from_segment(SampledSegment.from_answer(item))
            report = await judge_as_a_validator(item, spec, dataset, replayer, market, task_id, weights)
            reports.setdefault(claim.worker, []).append(report)
            txs.append(chain.tx(operator, pb.MsgSubmitVerdict(
                task_id=task_id, round=claim.round, worker=claim.worker_bytes, segment=claim.segment,
                verdict=report.verdict, evidence_hash=report.evidence_hash(),
                replay_commitment=evidence.commitment(operator.address, b"s" * 32, evidence.replay_digest(report)))))
        chain.block(*txs)

    async def scenario() -> int:
        async with serving(services):
            task_id, contexts = await register_and_join(market, services, spec_bytes, samples_per_worker=2)

            async def between(alive):
                phase = market.task(task_id)["phase"]
                if phase == "sampling":
                    chain.advance(1)
                elif phase == "verify":
                    await verify_pending(task_id)

            await step_until_the_first_is_done(services, contexts, between)
            return task_id

    try:
        task_id = asyncio.run(scenario())
    finally:
        replayer.close()
    return JudgedTask(market, task_id, spec, dataset, services, reports)
