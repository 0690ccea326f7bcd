"""A one-round task on a chain, played by three workers (honest, bf16 cheat, offline), for the verifier's
service tests: against the wallet tests' FakeNode and against a real `trolly-node dev`.

    scenario = await open_and_commit(client, tmp_path)   # registers, submits, joins, trains, serves, commits
    ... run the verifier ...
    await scenario.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import time
from typing import Iterator

import torch

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto import bank_pb2
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.blobs import BlobServer, BlobStore
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer, initial_weights
from trolly.compute.cheats import CheatContext
from trolly.wallet.market_queries import get_task
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import TxSender

from net_helpers import free_port
from verifier_helpers import digits, own_profile, play, tiny_spec_document
from wallet_helpers import FakeNode, dev_app_state

WORKERS = [dev_key(1), dev_key(2), dev_key(3)]  # join order = worker index: honest, cheat, offline
STRATEGIES = ["honest", "bf16", "honest"]
VALIDATOR = dev_key(0)
REWARD = 1_000_000
WORKER_STAKE = 10_000_000
COLLATERAL = 4 * REWARD


MARKET_PARAMS = {"min_worker_stake": 1_000_000, "min_collateral": 100_000, "worker_unbonding_blocks": 5,
                 "verification_window": 5000, "sampling_delay": 1, "min_round_blocks": 2}
"""Market params of the verifier tests' in-process node: short periods, sampling one block after a commit."""


@contextlib.contextmanager
def market_node(workers) -> Iterator[FakeNode]:
    """An in-process node (50 ms blocks) with MARKET_PARAMS and 100 TRL for each of `workers`."""
    state = dev_app_state({"market": MARKET_PARAMS})
    state["accounts"] += [{"address": encode_address(k.address), "balance": str(100_000_000)} for k in workers]
    fake = FakeNode(state, block_interval=0.05).start()
    try:
        yield fake
    finally:
        fake.stop()


async def send(client: AsyncRpcClient, key, message) -> None:
    sender = TxSender(client)
    plan = await sender.plan(encode_address(key.address), [message], None)  # the chain's minimum for its size
    outcome = await sender.send(key, plan, wait=True, timeout=30)
    assert outcome.included is not None and outcome.included.code == 0, outcome


async def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@dataclasses.dataclass
class Scenario:
    client: AsyncRpcClient
    task_id: int
    servers: list

    async def close(self) -> None:
        for server in self.servers:
            await server.stop()
        await self.client.close()

    async def task(self) -> dict:
        return (await get_task(self.client, self.task_id)).to_answer()

    async def outcomes(self) -> dict[str, str]:
        task = await self.task()
        return {c["worker"]: c["outcome"] for c in task["round_details"][0]["commitments"]}


async def open_and_commit(url: str, directory, *, fund: bool = False) -> Scenario:
    """Register three workers (the third's blob URL answers nothing), open a one-round task with every segment
    sampled, train each worker's round (worker 1 fakes segment 1 in bf16), serve and commit it; return once the
    chain has sampled the segments."""
    client = AsyncRpcClient(url)
    if fund:
        for key in WORKERS:
            await send(client, VALIDATOR, bank_pb2.MsgSend(to=key.address, amount=WORKER_STAKE + 2 * COLLATERAL))
    spec_bytes = json.dumps(tiny_spec_document(digits().manifest_hash, rounds=1)).encode()
    spec = parse_spec(spec_bytes)
    servers = []
    for index, key in enumerate(WORKERS):
        if index < 2:
            server = BlobServer(BlobStore(directory / f"worker-{index}"))
            await server.start()
            servers.append(server)
            blob_url = server.url
        else:
            blob_url = f"http://127.0.0.1:{free_port()}"  # nothing listens here
        await send(client, key, pb.MsgRegisterWorker(stake=WORKER_STAKE, blob_url=blob_url, hardware=pb.HardwareProfile(
            device="cpu", samples_per_second=100, memory_mb=1024, threads=1)))
    before = {t["id"] for t in (await client.query_json("/market/tasks"))["tasks"]}
    await send(client, VALIDATOR, pb.MsgSubmitTask(
        spec=spec_bytes, spec_hash=hashlib.sha256(spec_bytes).digest(), budget=10 * REWARD, workers=3, rounds=1,
        reward_per_round=REWARD, collateral=COLLATERAL, join_blocks=500, round_blocks=500, samples_per_worker=3))
    task_id = max({t["id"] for t in (await client.query_json("/market/tasks"))["tasks"]} - before)
    for key in WORKERS:
        await send(client, key, pb.MsgJoinTask(task_id=task_id))
    trainer = Trainer(spec, digits())
    start = initial_weights(spec, digits().shape)
    for index, (key, strategy) in enumerate(zip(WORKERS, STRATEGIES)):
        played = play(strategy, CheatContext(trainer, start, index, 0, spec.training.inner_steps, frozenset({1}),
                                             torch.Generator().manual_seed(1)))
        published = played.publish()  # checkpoints, the update and the residual (the worker's first round)
        if index < 2:
            store = servers[index].store
            for data in published.blobs.values():
                store.put(data)
            store.set_checkpoints(task_id, 0, list(published.listing))
        await send(client, key, pb.MsgCommitRound(
            task_id=task_id, round=0, update_hash=published.update_hash,
            samples_processed=played.samples_processed, steps=played.steps, checkpoint_root=published.checkpoint_root,
            num_checkpoints=len(published.listing), start_weights_hash=played.start_weights_hash,
            determinism_profile=own_profile(), residual_hash=published.residual_hash))

    async def sampled():
        work = await client.query_json(f"/market/verify/{encode_address(VALIDATOR.address)}")
        return len([s for s in work["segments"] if s["task_id"] == task_id]) == 9

    await wait_for(sampled, what="sampling")
    return Scenario(client, task_id, servers)


def landed_verdicts(task: dict) -> dict[tuple[str, int], list[str]]:
    """(worker, segment) -> the verdicts on chain (a list, so a second vote would show)."""
    verdicts: dict[tuple[str, int], list[str]] = {}
    for commitment in task["round_details"][0]["commitments"]:
        for vote in commitment["verdicts"]:
            verdicts.setdefault((commitment["worker"], vote["segment"]), []).append(vote["verdict"])
    return verdicts


def landed_decisions(task: dict) -> dict[tuple[str, int], str]:
    """(worker, segment) -> the chain's decision on it, which outlives the votes (deleted when the round's reveal
    window closes)."""
    return {(commitment["worker"], segment): decision
            for commitment in task["round_details"][0]["commitments"]
            for segment, decision in zip(commitment["segments"], commitment["decisions"])}


def assert_decided_correctly(task: dict) -> None:
    """Honest worker passed on all three segments, the cheat failed on its faked one, the offline one failed
    (as unavailable, and no segment got two votes, while the votes are still on chain: a loaded machine may read
    the task after its reveal window closed and the votes were deleted, leaving the decisions)."""
    honest, cheat, offline = (encode_address(k.address) for k in WORKERS)
    decisions = landed_decisions(task)
    assert [decisions[(honest, s)] for s in range(3)] == ["pass"] * 3
    assert decisions[(cheat, 1)] == "fail"
    assert "fail" in [d for (w, _), d in decisions.items() if w == offline]
    if not any(c["verdicts_deleted"] for c in task["round_details"][0]["commitments"]):
        verdicts = landed_verdicts(task)
        assert all(len(v) == 1 for v in verdicts.values()), verdicts
        assert [verdicts[(honest, s)] for s in range(3)] == [["pass"]] * 3
        assert verdicts[(cheat, 1)] == ["fail"]
        assert ["unavailable"] in [v for (w, _), v in verdicts.items() if w == offline]
    outcomes = {c["worker"]: c["outcome"] for c in task["round_details"][0]["commitments"]}
    assert outcomes == {honest: "passed", cheat: "failed", offline: "failed"}
