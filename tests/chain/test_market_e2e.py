"""End to end: a whole task through a real `trolly-node dev` (solo engine, ABCI socket, JSON-RPC on 127.0.0.1).

Two workers register, join, commit synthetic work; the dev validator (dev_key(0) operates it) reads
`/market/verify`, votes; the workers report the final weights; everyone is paid exactly. Checks that the
sampled segments come from the seed of the engine's vote extension and that `tx_search` finds the task's
events.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request

import pytest
from dev_node import Client, dev_node
from click.testing import CliRunner

from market_helpers import commit_message, digest, final_message, spec_bytes
from market_helpers import reveal_message, verdict_message
from trolly.abci_app.seed import SEED_TAG, SEED_TX_PREFIX
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.market.economics import minimum_collateral, task_cost
from trolly.chain.market.params import MarketParams
from trolly.chain.market.records import VERDICT_PASS
from trolly.chain.market.sampling import sample_segments
from trolly.chain.rewards import DISTRIBUTION_POOL
from trolly.chain.proto import bank_pb2, market_pb2 as pb
from trolly.wallet.cli import cli

pytestmark = pytest.mark.slow

TRL = 10**6


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with dev_node(tmp_path_factory.mktemp("market-node")) as url:
        yield url


@pytest.fixture
def client(node):
    client = Client(node)
    try:
        yield client
    finally:
        client.rpc.close()


def extension_seed(url: str, height: int) -> bytes:
    """The sampling seed block `height` proves with its first transaction, built from the engine's vote
    extension (abci_app/seed.py); the dev genesis samples from nothing else."""
    with urllib.request.urlopen(f"{url}/block?height={height}", timeout=10) as answer:
        first = base64.b64decode(json.loads(answer.read())["result"]["block"]["data"]["txs"][0])
    assert first.startswith(SEED_TX_PREFIX)
    return hashlib.sha256(SEED_TAG + first[len(SEED_TX_PREFIX):]).digest()


def sole_validator_holdings(client, operator) -> int:
    """The operator's balance plus the fee rewards credited to its validator and not yet withdrawn: with a sole
    validator, everything the distribution account holds outside the community pool."""
    rewards = client.query(f"/account/{encode_address(DISTRIBUTION_POOL)}")["balance"]
    return client.balance(operator) + int(rewards) - client.query("/community_pool")["amount"]


def test_a_whole_task_settles_on_a_real_node(node, client):
    requester, workers = dev_key(0), [dev_key(31), dev_key(32)]
    for worker in workers:
        client.send(requester, bank_pb2.MsgSend(to=worker.address, amount=100 * TRL))
    params = MarketParams(**client.query("/market/params"))
    for i, worker in enumerate(workers):
        client.send(worker, pb.MsgRegisterWorker(
            stake=params.min_worker_stake, blob_url=f"http://127.0.0.1:{9100 + i}",
            hardware=pb.HardwareProfile(device="cpu", samples_per_second=100)))

    spec = spec_bytes(rounds=1)  # 20 inner steps, a checkpoint every 5: 4 segments
    reward = 2 * TRL
    cost = task_cost(1, reward, params.validator_fee_bps, params.verifier_fee_bps)
    collateral = minimum_collateral(reward, 2, 4, 2, params.value_at_risk_bps, params.min_collateral)
    result = client.send(requester, pb.MsgSubmitTask(
        spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=cost + 7, workers=2, rounds=1,
        reward_per_round=reward, collateral=collateral, join_blocks=100, round_blocks=100, samples_per_worker=2))
    task_id = int(next(e for e in result.events if e.type == "task").get("id"))
    before = {w.address: client.balance(w) for w in workers}
    requester_before = sole_validator_holdings(client, requester)
    client.fees_paid.clear()  # tx fees from here on
    for worker in workers:
        client.send(worker, pb.MsgJoinTask(task_id=task_id))
    steps = [20, 10]
    for worker, step in zip(workers, steps):
        client.send(worker, commit_message(task_id, 0, worker.address.hex(), steps=step))

    view = client.wait_for(task_id, lambda v: v["phase"] == "verify", "sampling")
    sampled_at = view["phase_deadline"] - params.verification_window
    seed = extension_seed(node, sampled_at)
    items = client.query(f"/market/verify/{encode_address(requester.address)}")["segments"]
    for worker, step in zip(workers, steps):
        drawn = [i["segment"] for i in items if i["worker"] == encode_address(worker.address)]
        assert drawn == sorted(sample_segments(seed, task_id, 0, worker.address, -(-step // 5), 2))

    client.send(requester, *[verdict_message(requester, task_id, i, VERDICT_PASS, evidence=digest("replayed"))
                             for i in items])
    client.wait_for(task_id, lambda v: v["round"] == 1 and v["phase"] == "commit", "the final report phase")
    client.send(requester, *[reveal_message(task_id, i) for i in items])  # the replay digests the votes hid
    for worker in workers:
        client.send(worker, final_message(task_id, 1, digest("W_R")))
    client.wait_for(task_id, lambda v: v["round"] == 1 and v["phase"] == "verify", "the final report's sampling")
    finals = client.query(f"/market/verify/{encode_address(requester.address)}")["segments"]
    assert len(finals) == 2 and {i["segment"] for i in finals} == {0}  # one check per report
    client.send(requester, *[verdict_message(requester, task_id, i, VERDICT_PASS, evidence=digest("derived"))
                             for i in finals])
    client.wait_for(task_id, lambda v: v["status"] == "completed", "completion")
    client.send(requester, *[reveal_message(task_id, i) for i in finals])
    view = client.wait_for(task_id, lambda v: all(c["held_verifier_fee"] == 0 for c in v["round_details"][0]["commitments"]),
                           "the reveal window's close (held verifier fees paid)")

    total = sum(steps)
    pays = [reward * s // total for s in steps]
    assert view["final_weights_hash"] == digest("W_R").hex()
    for worker, pay in zip(workers, pays):
        # collateral back, pay added, its transactions' fees gone
        assert client.balance(worker) == before[worker.address] + pay - client.fees_paid[worker.address]
    fees = sum(p * params.validator_fee_bps // 10_000 + p * params.verifier_fee_bps // 10_000 for p in pays)
    # The requester is also the sole validator: it gets the task's fees back as validator and verifier, and
    # every transaction's fee (its own included) as the block's only validator, as commission in its balance
    # and the rest as rewards credited to its self-bond (its holdings).
    tx_fees = sum(client.fees_paid.values())
    assert sole_validator_holdings(client, requester) == (requester_before + (cost + 7) - sum(pays) - fees + fees
                                         - client.fees_paid[requester.address] + tx_fees)

    found, count = client.rpc.tx_search(f"task.id='{task_id}'", per_page=100)
    actions = {e.get("action") for r in found for e in r.events if e.type == "task"}
    assert {"submitted", "joined", "started", "committed", "verdict", "segment_decided"} <= actions and count >= 7

    shown = CliRunner().invoke(cli, ["task", "status", str(task_id), "-o", "json"], env={"TROLLY_NODE": node},
                               catch_exceptions=False)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["status"] == "completed"
