"""A verifier that votes PASS without replaying (the TEST SWITCH `lazy_pass_without_replay`) is found out: its
revealed replay digests disagree with the replaying majority, so it earns no verifier fee and its stake pays
`lazy_verifier_penalty` per segment, while the honest verifier beside it keeps its stake."""

from __future__ import annotations

import asyncio
import base64

import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.verifier.service import ServiceConfig, VerifierService
from trolly.verifier.votes import VoteRecord
from trolly.wallet.rpc import AsyncRpcClient

from verifier_scenario import MARKET_PARAMS, VALIDATOR, WORKERS, open_and_commit
from wallet_helpers import FakeNode, dev_app_state

LAZY = dev_key(5)
LAZY_CONSENSUS = dev_key(8)
LAZY_STAKE = 4 * 10**6
"""Power 4 beside the honest validator's 10: under a third, so the honest replay's digest holds the two thirds that
make it the true one (a minority never defines it, issue 32 item 1); the lazy verifier passes first in each loop
(it replays nothing), so its votes are cast before the honest ones decide the segments."""
PENALTY = 500_000
PARAMS = {**MARKET_PARAMS, "verification_window": 200, "reveal_window": 100, "lazy_verifier_penalty": PENALTY}


def genesis() -> dict:
    state = dev_app_state({"market": PARAMS})
    state["accounts"] += [{"address": encode_address(k.address), "balance": str(100_000_000)} for k in WORKERS]
    state["accounts"].append({"address": encode_address(LAZY.address), "balance": str(100_000_000)})
    state["validators"].append({"operator": encode_address(LAZY.address), "stake": str(LAZY_STAKE), "moniker": "lazy",
                                "pub_key": base64.b64encode(LAZY_CONSENSUS.pubkey).decode()})
    return state


def config(node, home, lazy: bool) -> ServiceConfig:
    return ServiceConfig(home=home, node=node.url, unavailable_attempts=2, retry_delay=0.0, websocket=False,
                         poll_interval=0.1, allow_private_blob_hosts=True, lazy_pass_without_replay=lazy)


@pytest.mark.slow
def test_a_verifier_voting_pass_without_replaying_loses_its_fee_and_pays_the_penalty(tmp_path):
    node = FakeNode(genesis(), block_interval=0.05).start()

    async def main():
        client = AsyncRpcClient(node.url)
        scenario = await open_and_commit(node.url, tmp_path)
        honest = VerifierService(config(node, tmp_path / "honest", lazy=False), VALIDATOR, AsyncRpcClient(node.url))
        lazy = VerifierService(config(node, tmp_path / "lazy", lazy=True), LAZY, AsyncRpcClient(node.url))
        stakes = {}
        try:
            for key in (VALIDATOR, LAZY):
                stakes[key.address] = int((await client.query_json(f"/validator/{encode_address(key.address)}"))["stake"])
            seen = None  # the task as last seen with its votes: the reveal window's close deletes them
            for _ in range(600):
                await lazy.run_once()
                await honest.run_once()
                answer = await scenario.task()
                if any(c["verdicts"] for c in answer["round_details"][0]["commitments"]):
                    seen = answer
                view = await client.query_json(f"/validator/{encode_address(LAZY.address)}")
                if int(view["stake"]) < stakes[LAZY.address]:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # every penalty of the window falls in the same end-block
            lazy_stake = int((await client.query_json(f"/validator/{encode_address(LAZY.address)}"))["stake"])
            honest_stake = int((await client.query_json(f"/validator/{encode_address(VALIDATOR.address)}"))["stake"])
            task = await scenario.task()
        finally:
            await honest.close()
            await lazy.close()
            await scenario.close()
            await client.close()
        penalties, remainder = divmod(stakes[LAZY.address] - lazy_stake, PENALTY)
        # Caught on every segment the honest verifier replayed (the offline worker's are UNAVAILABLE: no replay).
        assert remainder == 0 and penalties >= 3, (penalties, remainder)
        assert honest_stake == stakes[VALIDATOR.address]
        assert all(c["verdicts_deleted"] and not c["verdicts"] for c in task["round_details"][0]["commitments"])
        verdicts = [v for c in seen["round_details"][0]["commitments"] for v in c["verdicts"]]
        by_voter = {}
        for v in verdicts:
            by_voter.setdefault(v["validator"], {})[(v["segment"], v["verdict"])] = v["replay_digest"]
        assert all(by_voter[encode_address(LAZY.address)].values())  # it revealed, but not what a replay gives
        honest_digests = {d for d in by_voter[encode_address(VALIDATOR.address)].values() if d}
        assert honest_digests and not honest_digests & set(by_voter[encode_address(LAZY.address)].values())
        # A vote the chain accepted after others decided its segment is not revealed (that reveal would be refused,
        # and the round's other reveals with it): late, never refused.
        counts = VoteRecord(tmp_path / "honest" / "votes.sqlite").reveal_counts()
        assert counts.get("sent", 0) + counts.get("late", 0) >= 6 and not counts.get("refused"), counts

    try:
        asyncio.run(main())
    finally:
        node.stop()
