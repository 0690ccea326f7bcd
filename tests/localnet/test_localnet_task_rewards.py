"""Issue 35's test (b) on real processes: a delegator's rewards over a task's settlement match the chain's events
to the unit. A solo-engine localnet runs (its app, engine, verifier and three workers as processes); the
requester delegates to validator-0 before the demo's digits task is submitted (the demo's own code, in this
process, so the delegation is surely first); the task is trained, verified and settled by the workers and the
verifier; then the requester withdraws its rewards. From `block_results`, every block from the delegation's to
the one before the withdrawal:

- the validator's `reward` event of each block distributes exactly that block's fees: the fees of its
  transactions (their `tx` events) plus the validator fees of its task `payout` events (the solo engine has one
  validator, so it takes the whole fee collector; the task's verifier fees go to the verifier's operator
  directly, every one earned by an honest verifier, none left to the collector);
- the task's settlement is in those blocks: every `payout` of the task, and their validator fees add up to what
  the task view says it paid in fees less its verifier fees;
- each `reward` splits into commission (the validator's rate, rounded down) plus delegators exactly;
- no other delegation of validator-0 changes in between (so one F1 period), and what the withdrawal pays (its
  `withdraw_rewards` event, and the balance change less the fee) is exactly the delegator's F1 share of the
  summed `delegators` parts: shares * (sum * 10^36 // total shares) // 10^36 (docs/protocol.md 5.3)."""

from __future__ import annotations

import asyncio
import functools
import io
import time

import pytest
from rich.console import Console

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto.distribution_pb2 import MsgWithdrawRewards
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.localnet.demo import Demo, DemoOptions
from trolly.localnet.home_layout import REQUESTER_INDEX, LocalnetConfig
from trolly.localnet.network import Localnet

from dev_node import send_included
from localnet_helpers import free_base_port, query
from reward_helpers import DELEGATION_MESSAGES, block_events, f1_payout
from whole_task import whole_task

pytestmark = pytest.mark.slow

OPERATOR, DELEGATOR = dev_key(0), dev_key(REQUESTER_INDEX)
DELEGATED = 7_000_001
ROUNDS = 2
TASK_TIMEOUT = 300  # seconds the demo follows its task


def run_task(net: Localnet, config: LocalnetConfig) -> dict:
    """The demo's digits task submitted, followed to its end and checked against the balances, as `demo` does."""
    options = DemoOptions(rounds=ROUNDS, timeout=TASK_TIMEOUT)
    return asyncio.run(Demo(net, config, options, Console(file=io.StringIO())).run(time.monotonic()))


def test_a_delegators_rewards_over_a_settled_task_are_its_share_of_the_reward_events_to_the_unit(tmp_path):
    operator, delegator = encode_address(OPERATOR.address), encode_address(DELEGATOR.address)
    net = Localnet(tmp_path / "net", LocalnetConfig(engine="solo", validators=1, base_port=free_base_port()))
    try:
        config = net.up()
        url = config.rpc_url(0)
        delegated = send_included(url, DELEGATOR, MsgDelegate(validator=OPERATOR.address, amount=DELEGATED))
        summary = run_task(net, config)
        assert summary["status"] == "completed" and summary["rounds"] == ROUNDS
        task = whole_task(functools.partial(query, url), summary["task_id"])
        shares = int(query(url, f"/delegations/{delegator}")["delegations"][0]["shares"])
        validator = query(url, f"/validator/{operator}")
        before = int(query(url, f"/account/{delegator}")["balance"])
        withdrawn = send_included(url, DELEGATOR, MsgWithdrawRewards(validator=OPERATOR.address))
        after = int(query(url, f"/account/{delegator}")["balance"])
        blocks = block_events(url, delegated.included.height, withdrawn.included.height - 1)
    finally:
        net.down()

    task_id = str(summary["task_id"])
    payouts = [e for b in blocks for e in b.of_block("task") if e["id"] == task_id and e["action"] == "payout"]
    assert {int(p["round"]) for p in payouts if int(p["amount"]) > 0} == set(range(ROUNDS))  # every round paid
    validator_fees = sum(int(p["validator_fee"]) for p in payouts)
    verifier_fees = sum(int(p["verifier_fee"]) for p in payouts)
    assert validator_fees > 0 and task["paid_fees"] == validator_fees + verifier_fees

    credited = []
    for block in blocks:
        fees = (sum(int(e["fee"]) for e in block.of_txs("tx"))
                + sum(int(e["validator_fee"]) for e in block.of_block("task") if e["action"] == "payout"))
        rewards = [e for e in block.of_block("reward") if e["operator"] == operator]
        assert sum(int(e["amount"]) for e in rewards) == fees, f"height {block.height}"
        for event in rewards:
            share, commission = int(event["amount"]), int(event["commission"])
            assert commission == share * validator["commission_rate"] // 10_000
            assert commission + int(event["delegators"]) == share
            credited.append(int(event["delegators"]))
        if block.height > delegated.included.height:  # one rewards period: nothing else changed a delegation
            changes = [e["action"] for e in block.of_txs("message") if e["action"] in DELEGATION_MESSAGES]
            assert changes == [], f"height {block.height}"
    payout_blocks = {b.height for b in blocks for e in b.of_block("task") if e["action"] == "payout"}
    assert payout_blocks and all(any(e["operator"] == operator for e in b.of_block("reward"))
                                 for b in blocks if b.height in payout_blocks)

    expected = f1_payout(shares, int(validator["delegator_shares"]), [sum(credited)])
    (paid,) = [int(e.get("amount")) for e in withdrawn.included.events if e.type == "withdraw_rewards"]
    (fee,) = [int(e.get("fee")) for e in withdrawn.included.events if e.type == "tx"]
    assert 0 < paid == expected
    assert after - before == paid - fee
