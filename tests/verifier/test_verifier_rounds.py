"""The round's aggregation check in the service: round 1 must start from the outer step over round 0's passed
updates, which the verifier derives itself. Workers that agree among themselves on other start weights
(here: all of them reuse W_0, every member of the round) fail every sampled segment: a unanimous start is
not adopted (issue 24 item 1)."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
import torch

from trolly.chain.crypto import encode_address
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.blobs import BlobServer, BlobStore
from trolly.compute.codecs import get_codec
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer, initial_weights
from trolly.compute.cheats import CheatContext, honest_round
from trolly.verifier.service import ServiceConfig, VerifierService
from trolly.wallet.market_queries import get_task
from trolly.wallet.rpc import AsyncRpcClient

from verifier_helpers import digits, own_profile, tiny_spec_document
from verifier_scenario import REWARD, VALIDATOR, WORKER_STAKE, market_node, send, wait_for

from trolly.chain.hd import dev_key

WORKERS = [dev_key(4), dev_key(5)]
RESIDUALS: dict[tuple[int, int], dict] = {}
"""Each (task, worker)'s residual after its last round (`CheatedRound.publish` makes it; each test's node starts
its task ids anew, so round 0 never reads it)."""


@pytest.fixture
def node():
    with market_node(WORKERS) as fake:
        yield fake


async def play_round(client, spec, trainer, servers, task_id: int, round_index: int, start) -> list[tuple[int, int, bytes]]:
    """Both workers train honestly from `start`, serve and commit; returns (index, samples, encoded update)."""
    encoded = []
    for index, key in enumerate(WORKERS):
        played = honest_round(CheatContext(trainer, start, index, round_index, spec.training.inner_steps,
                                                  frozenset(), torch.Generator()))
        # error feedback across rounds, as a worker does: each round's update carries the last round's residual
        published = played.publish(previous_residual=RESIDUALS.get((task_id, index)) if round_index else None)
        RESIDUALS[(task_id, index)] = published.residual
        update = published.blobs[published.update_hash.hex()]
        store = servers[index].store
        for data in published.blobs.values():
            store.put(data)
        store.set_checkpoints(task_id, round_index, list(published.listing))
        await send(client, key, pb.MsgCommitRound(
            task_id=task_id, round=round_index, update_hash=published.update_hash,
            samples_processed=played.samples_processed, steps=played.steps, checkpoint_root=published.checkpoint_root,
            num_checkpoints=len(published.listing), start_weights_hash=played.start_weights_hash,
            determinism_profile=own_profile(), residual_hash=published.residual_hash))
        encoded.append((index, played.samples_processed, update))
    return encoded


async def wait_sampled(client, task_id: int, round_index: int) -> None:
    async def sampled():
        work = (await client.query_json(f"/market/verify/{encode_address(VALIDATOR.address)}"))["segments"]
        return len([s for s in work if s["task_id"] == task_id and s["round"] == round_index]) == 6

    await wait_for(sampled, what=f"sampling of round {round_index}")


@pytest.mark.slow
@pytest.mark.parametrize("round_one_start", ["aggregate", "stale", "unserved"])
def test_round_start_weights_are_checked_against_the_verifiers_own_aggregate(node, tmp_path, round_one_start):
    async def main():
        client = AsyncRpcClient(node.url)
        servers = [BlobServer(BlobStore(tmp_path / f"worker-{i}")) for i in range(2)]
        for server in servers:
            await server.start()
        service = VerifierService(ServiceConfig(home=tmp_path / "verifier", node=node.url, websocket=False,
                                                retry_delay=0.0, allow_private_blob_hosts=True,
                                                unavailable_attempts=1, deadline_margin=10**6),  # vote at once
                                  VALIDATOR, AsyncRpcClient(node.url))
        try:
            spec_bytes = json.dumps(tiny_spec_document(digits().manifest_hash, rounds=2)).encode()
            spec = parse_spec(spec_bytes)
            for server, key in zip(servers, WORKERS):
                await send(client, key, pb.MsgRegisterWorker(stake=WORKER_STAKE, blob_url=server.url,
                                                             hardware=pb.HardwareProfile(device="cpu", samples_per_second=100, memory_mb=1024, threads=1)))
            await send(client, VALIDATOR, pb.MsgSubmitTask(
                spec=spec_bytes, spec_hash=hashlib.sha256(spec_bytes).digest(), budget=10 * REWARD, workers=2,
                rounds=2, reward_per_round=REWARD, collateral=4 * REWARD, join_blocks=500, round_blocks=500,
                samples_per_worker=3))
            task_id = max(t["id"] for t in (await client.query_json("/market/tasks"))["tasks"])
            for key in WORKERS:
                await send(client, key, pb.MsgJoinTask(task_id=task_id))
            trainer = Trainer(spec, digits())
            w0 = GlobalState.initial(initial_weights(spec, digits().shape))

            encoded = await play_round(client, spec, trainer, servers, task_id, 0, dict(w0.weights))
            await wait_sampled(client, task_id, 0)
            assert {r.outcome for r in await service.run_once()} == {"pass"}

            async def round_one_open():
                task = await client.query_json(f"/market/task/{task_id}")
                return task["round"] == 1 and task["phase"] == "commit"

            await wait_for(round_one_open, what="round 1")
            codec = get_codec(spec.codec)
            w1 = outer_step(w0, [WorkerUpdate(i, s, codec.decode(d)) for i, s, d in encoded], spec.training.outer_optimizer)
            start = dict(w0.weights) if round_one_start == "stale" else dict(w1.weights)
            await play_round(client, spec, trainer, servers, task_id, 1, start)
            if round_one_start == "unserved":  # round 0's updates served by nobody: W_1 cannot be derived
                for server, (_, _, data) in zip(servers, encoded):
                    server.store.path(hashlib.sha256(data).hexdigest()).unlink()
            await wait_sampled(client, task_id, 1)
            task = (await get_task(client, task_id)).to_answer()
            assert task["round_details"][1]["start_weights_hash"] == ""  # recorded once the round is verified

            reports = await service.run_once()
            assert len(reports) >= 1
            if round_one_start == "aggregate":
                assert {r.outcome for r in reports} == {"pass"} and len(reports) == 6
            elif round_one_start == "unserved":  # never the chain's nor the workers' word for it
                assert {r.outcome for r in reports} == {"unavailable"}
                assert all("cannot derive the round's start weights" in r.reason for r in reports)
            else:
                assert {r.outcome for r in reports} == {"fail"}
                assert all("derived by this verifier" in r.reason for r in reports)
        finally:
            await service.close()
            for server in servers:
                await server.stop()
            await client.close()

    asyncio.run(main())
