"""Shared by the worker tests: `ChainMarket`, the worker's market calls answered by an in-process chain
(`chain_helpers.Chain`), a small task spec, and a service built as a freshly started process would be."""

from __future__ import annotations

import json

from trolly.chain.crypto import encode_address
from trolly.chain.errors import NotFound
from trolly.chain.market.params import MarketParams
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.tx import decode_tx, tx_hash
from trolly.compute.spec import example_spec
from trolly.compute.worker.config import WorkerConfig
from trolly.compute.worker.service import ServiceOptions, WorkerService
from trolly.wallet.errors import NodeUnreachable, TxRejected
from trolly.wallet.market_answers import parse_answer
from trolly.wallet.market_views import ReplayGpus, TaskPage, TaskView, WorkerView
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
    from trolly.wallet.market_views import SampledSegment, TaskView

    claim = SegmentClaim.from_segment(SampledSegment.from_answer(item))
    view = TaskView.from_answer(market.task(task_id))
    if claim.round == view.rounds:
        return verify_final_report(claim, (await weights.state(claim.round, view)).weights_hash())
    async with BlobClient([claim.blob_url], address_policy=AddressPolicy(allow_private=True)) as source:
        return await verify_segment(claim, spec, dataset, source, replayer)
