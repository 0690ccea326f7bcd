"""The verifier service against the real chain rules (the wallet tests' FakeNode over loopback JSON-RPC) and
real blob servers: it votes PASS on honest work, FAIL on a cheat, UNAVAILABLE on an unreachable worker only
after its retries, never twice, and not again after a restart."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time

import pytest

from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.blobs import BlobServer, BlobStore
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.training import Trainer, initial_weights
from trolly.verifier.cheats import CheatContext, get_cheat
from trolly.verifier.service import ServiceConfig, VerifierService
from trolly.verifier.votes import VoteRecord
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import TxSender

from verifier_helpers import digits, own_profile, tiny_spec_document
from wallet_helpers import FakeNode, dev_app_state

import json
import torch

MARKET_PARAMS = {"min_worker_stake": 1_000_000, "min_collateral": 100_000, "worker_unbonding_blocks": 5,
                 "verification_window": 200, "sampling_delay": 1, "min_round_blocks": 2}
WORKERS = [dev_key(1), dev_key(2), dev_key(3)]  # join order = worker index: honest, cheat, offline
VALIDATOR = dev_key(0)
REWARD = 1_000_000


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def node():
    state = dev_app_state({"staking": {"unbonding_blocks": 3}, "market": MARKET_PARAMS})
    state["accounts"] += [{"address": encode_address(k.address), "balance": str(100 * REWARD)} for k in WORKERS]
    fake = FakeNode(state, block_interval=0.05).start()
    try:
        yield fake
    finally:
        fake.stop()


async def send(client: AsyncRpcClient, key, message) -> None:
    sender = TxSender(client)
    plan = await sender.plan(encode_address(key.address), [message], 0)
    outcome = await sender.send(key, plan, wait=True, timeout=20)
    assert outcome.included is not None and outcome.included.code == 0, outcome


async def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("condition not reached in time")


async def scenario(node, tmp_path, unavailable_attempts: int):
    """Open a one-round task with three workers, train and commit, return (client, task id, servers)."""
    client = AsyncRpcClient(node.url)
    spec_document = tiny_spec_document(digits().manifest_hash, rounds=1)
    spec_bytes = json.dumps(spec_document).encode()
    from trolly.compute.spec import parse_spec
    spec = parse_spec(spec_bytes)
    servers = []
    urls = []
    for index, key in enumerate(WORKERS):
        if index < 2:
            server = BlobServer(BlobStore(tmp_path / f"worker-{index}"))
            await server.start()
            servers.append(server)
            urls.append(server.url)
        else:
            urls.append(f"http://127.0.0.1:{unused_port()}")  # never served
        await send(client, key, pb.MsgRegisterWorker(stake=2_000_000, blob_url=urls[-1], hardware=pb.HardwareProfile(
            device="cpu", samples_per_second=100, memory_mb=1024, threads=1)))
    await send(client, VALIDATOR, pb.MsgSubmitTask(
        spec=spec_bytes, spec_hash=hashlib.sha256(spec_bytes).digest(), budget=10 * REWARD, workers=3, rounds=1,
        reward_per_round=REWARD, collateral=4 * REWARD, join_blocks=200, round_blocks=200, samples_per_worker=3))
    tasks = await client.query_json("/market/tasks")
    task_id = max(t["id"] for t in tasks["tasks"])
    for key in WORKERS:
        await send(client, key, pb.MsgJoinTask(task_id=task_id))
    trainer = Trainer(spec, digits())
    start = initial_weights(spec, digits().shape)
    for index, key in enumerate(WORKERS):
        strategy = "bf16" if index == 1 else "honest"
        cheated = get_cheat(strategy)(CheatContext(trainer, start, index, 0, spec.training.inner_steps,
                                                   frozenset({1}), torch.Generator().manual_seed(1)))
        published = cheated.publish()
        pseudo_gradient = {n: start[n] - cheated.checkpoints[-1].weights[n] for n in start}
        update, _ = ErrorFeedback(get_codec(spec.codec)).encode(pseudo_gradient)
        if index < 2:
            store = servers[index].store
            for data in (*published.blobs.values(), update):
                store.put(data)
            store.set_checkpoints(task_id, 0, list(published.listing))
        await send(client, key, pb.MsgCommitRound(
            task_id=task_id, round=0, update_hash=hashlib.sha256(update).digest(),
            samples_processed=cheated.samples_processed, steps=cheated.steps,
            checkpoint_root=published.checkpoint_root, num_checkpoints=len(published.listing),
            start_weights_hash=cheated.start_weights_hash, determinism_profile=own_profile()))

    async def sampled():
        work = await client.query_json(f"/market/verify/{encode_address(VALIDATOR.address)}")
        return len(work["segments"]) == 9

    await wait_for(sampled)
    config = ServiceConfig(home=tmp_path / "verifier", node=node.url, unavailable_attempts=unavailable_attempts,
                           retry_delay=0.0, websocket=False, poll_interval=0.1)
    return client, task_id, servers, config


def outcomes(task: dict) -> dict[str, str]:
    return {c["worker"]: c["outcome"] for c in task["round_details"][0]["commitments"]}


@pytest.mark.slow
def test_service_votes_pass_fail_and_unavailable_once_each_and_not_again_after_restart(node, tmp_path):
    async def main():
        client, task_id, servers, config = await scenario(node, tmp_path, unavailable_attempts=2)
        try:
            service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            first = await service.run_once()
            by_worker = {}
            for report in first:
                by_worker.setdefault(report.claim.worker_index, {})[report.claim.segment] = report.outcome
            assert by_worker[0] == {0: "pass", 1: "pass", 2: "pass"}
            assert by_worker[1][1] == "fail"
            assert 2 not in by_worker  # unreachable: one failed attempt, no vote yet
            await asyncio.sleep(0.3)
            await service._confirm_votes()
            second = await service.run_once()
            assert {r.claim.worker_index for r in second} == {2}
            assert all(r.outcome == "unavailable" for r in second) and len(second) == 3
            await asyncio.sleep(0.3)
            assert await service.run_once() == []
            await service.close()

            restarted = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            assert await restarted.run_once() == []
            await restarted.close()

            async def decided():
                task = await client.query_json(f"/market/task/{task_id}")
                states = outcomes(task)
                return task if "pending" not in states.values() else None

            task = await wait_for(decided)
            states = outcomes(task)
            assert states[encode_address(WORKERS[0].address)] == "passed"
            assert states[encode_address(WORKERS[1].address)] == "failed"
            assert states[encode_address(WORKERS[2].address)] == "failed"
            record = VoteRecord(config.home / "votes.sqlite")
            counts = record.counts()
            # Once a worker's first failing segment is decided the chain stops asking for its others, so some
            # later votes on that worker are refused; what counts is what landed.
            assert counts.get("pass", 0) >= 3 and counts.get("fail") == 1 and counts.get("unavailable", 0) >= 1
            assert len(list((config.home / "evidence").glob("*.json"))) >= 5
            landed = [(c["worker"], v["segment"], v["validator"])
                      for c in task["round_details"][0]["commitments"] for v in c["verdicts"]]
            assert len(landed) == len(set(landed))  # never two votes on one segment
            assert {validator for _, _, validator in landed} == {encode_address(VALIDATOR.address)}
            verdicts = {(worker, segment): v["verdict"] for c in task["round_details"][0]["commitments"]
                        for v in c["verdicts"] for worker, segment in [(c["worker"], v["segment"])]}
            assert [verdicts[(encode_address(WORKERS[0].address), s)] for s in range(3)] == ["pass"] * 3
            assert verdicts[(encode_address(WORKERS[1].address), 1)] == "fail"
            assert "unavailable" in {v for (w, _), v in verdicts.items() if w == encode_address(WORKERS[2].address)}
        finally:
            for server in servers:
                await server.stop()
            await client.close()

    asyncio.run(main())


@pytest.mark.slow
def test_an_unreachable_worker_is_retried_before_unavailable(node, tmp_path):
    async def main():
        client, task_id, servers, config = await scenario(node, tmp_path, unavailable_attempts=3)
        try:
            service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            offline = encode_address(WORKERS[2].address)
            for attempt in (1, 2):
                reports = await service.run_once()
                assert all(r.claim.worker != offline for r in reports), attempt
                key = (task_id, 0, offline, 0)
                assert service.record.attempts(key) == attempt
            reports = await service.run_once()
            assert [r.outcome for r in reports if r.claim.worker == offline] == ["unavailable"] * 3
            await service.close()
        finally:
            for server in servers:
                await server.stop()
            await client.close()

    asyncio.run(main())
