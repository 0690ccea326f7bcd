"""The verifier service against the real chain rules (the wallet tests' FakeNode over loopback JSON-RPC) and
real blob servers: it votes PASS on honest work, FAIL on a cheat, UNAVAILABLE on an unreachable worker only
after its retries, never twice, and not again after a restart."""

from __future__ import annotations

import asyncio

import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.tx import decode_tx
from trolly.verifier.service import ServiceConfig, VerifierService
from trolly.verifier.votes import BROADCAST, INCLUDED, VoteRecord
from trolly.wallet.nonces import NonceCache
from trolly.wallet.rpc import AsyncRpcClient

from verifier_scenario import VALIDATOR, WORKERS, assert_decided_correctly, market_node, open_and_commit, wait_for



@pytest.fixture
def node():
    with market_node(WORKERS) as fake:
        yield fake


def config_for(node, tmp_path, attempts: int, deadline_margin: int = 10**6) -> ServiceConfig:
    """By default the window counts as closing at once (the verification window here is 5,000 blocks), so that
    `attempts` alone decide when an unreachable worker is voted UNAVAILABLE."""
    return ServiceConfig(home=tmp_path / "verifier", node=node.url, unavailable_attempts=attempts, retry_delay=0.0,
                         deadline_margin=deadline_margin,
                         websocket=False, poll_interval=0.1, allow_private_blob_hosts=True)  # workers on loopback


@pytest.mark.slow
def test_service_votes_pass_fail_and_unavailable_once_each_and_not_again_after_restart(node, tmp_path):
    async def main():
        scenario = await open_and_commit(node.url, tmp_path)
        config = config_for(node, tmp_path, attempts=2)
        try:
            service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            first = await service.run_once()
            by_worker: dict[int, dict[int, str]] = {}
            for report in first:
                by_worker.setdefault(report.claim.worker_index, {})[report.claim.segment] = report.outcome
            assert by_worker[0] == {0: "pass", 1: "pass", 2: "pass"}
            assert by_worker[1][1] == "fail"
            assert 2 not in by_worker  # unreachable: one failed attempt, no vote yet
            for _ in range(5):  # retries, until every vote landed or was refused
                await asyncio.sleep(0.3)
                await service.run_once()
            await service.close()
            counts = VoteRecord(config.home / "votes.sqlite").counts()
            assert counts.get("unavailable", 0) >= 1 and counts.get("fail") == 1

            restarted = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            assert await restarted.run_once() == []
            await restarted.close()

            async def decided():
                return "pending" not in (await scenario.outcomes()).values()

            await wait_for(decided, what="the round's decision")
            assert_decided_correctly(await scenario.task())
            assert len(list((config.home / "evidence").glob("*.json"))) >= 5
        finally:
            await scenario.close()

    asyncio.run(main())


@pytest.mark.slow
def test_an_unreachable_worker_is_retried_before_unavailable(node, tmp_path):
    async def main():
        scenario = await open_and_commit(node.url, tmp_path)
        try:
            service = VerifierService(config_for(node, tmp_path, attempts=3), VALIDATOR, AsyncRpcClient(node.url))
            offline = encode_address(WORKERS[2].address)
            for attempt in (1, 2):
                reports = await service.run_once()
                assert all(r.claim.worker != offline for r in reports), attempt
                assert service.record.attempts((scenario.task_id, 0, offline, 0)) == attempt
            reports = await service.run_once()
            assert [r.outcome for r in reports if r.claim.worker == offline] == ["unavailable"] * 3
            await service.close()
        finally:
            await scenario.close()

    asyncio.run(main())


@pytest.mark.slow
def test_an_unreachable_worker_is_retried_across_the_whole_verification_window(node, tmp_path):
    """However many fetches fail, no UNAVAILABLE vote goes out while the window is far from closing: a worker
    kept unreachable for a while (a flooded blob port) is still verified if it comes back in time."""
    async def main():
        scenario = await open_and_commit(node.url, tmp_path)
        try:
            config = config_for(node, tmp_path, attempts=2, deadline_margin=3)
            service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            offline = encode_address(WORKERS[2].address)
            for attempt in (1, 2, 3, 4):
                reports = await service.run_once()
                assert all(r.claim.worker != offline for r in reports), attempt
                assert service.record.attempts((scenario.task_id, 0, offline, 0)) == attempt
            await service.close()
        finally:
            await scenario.close()

    asyncio.run(main())


@pytest.mark.slow
def test_votes_signed_with_a_stale_remembered_nonce_are_signed_again_at_once_and_reach_the_mempool(node, tmp_path):
    """A remembered nonce goes stale when a vote transaction leaves the mempools unincluded: CheckTx refuses the
    next one, and the verifier signs it again with the chain's nonce in the same pass, not a pass later (by
    then other validators may have decided the segments, and the vote would be lost)."""
    async def main():
        scenario = await open_and_commit(node.url, tmp_path)
        config = config_for(node, tmp_path, attempts=2)
        NonceCache(config.home).remember(encode_address(VALIDATOR.address), 1_000)  # far ahead of the chain's
        try:
            service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            voted = await service.run_once()
            await service.close()
            assert voted
            record = VoteRecord(config.home / "votes.sqlite")
            rows = [record.get(report.claim.key) for report in voted]
            assert all(row is not None and row.status in (BROADCAST, INCLUDED) for row in rows), rows
            nonces = {decode_tx(row.signed_tx).body.nonce for row in rows}
            assert max(nonces) < 1_000
        finally:
            await scenario.close()

    asyncio.run(main())
