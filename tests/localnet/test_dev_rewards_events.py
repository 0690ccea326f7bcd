"""A delegator's rewards match the chain's events to the unit, on a real `trolly-node dev` (CometBFT and the app
as processes): a second account delegates to the only validator, blocks carry fees (sends), and what
MsgWithdrawRewards pays (its `withdraw_rewards` event, and the balance change less the fee) is exactly the F1
share of the `delegators` part of every `reward` event of that validator from the delegation's block up to the
withdrawal's (that block's fees are credited after the withdrawal), read from CometBFT's `block_results`. Each
`reward` event also splits into commission (the rate of its share, rounded down) plus delegators exactly.

The same check across a task settled by real workers is `test_localnet_task_rewards.py`."""

from __future__ import annotations

import pytest

from dev_node import dev_node, send_included
from reward_helpers import f1_payout, reward_events
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto.distribution_pb2 import MsgWithdrawRewards
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.wallet.rpc import RpcClient
from trolly.wallet.txbuilder import send_message

pytestmark = pytest.mark.slow

OPERATOR, DELEGATOR = dev_key(0), dev_key(1)
SINK = bytes(range(60, 80))


def query(url: str, path: str):
    with RpcClient(url, timeout=10) as client:
        return client.query_json(path)


def test_a_delegators_withdrawn_rewards_are_its_share_of_the_reward_events_to_the_unit(tmp_path):
    operator, delegator = encode_address(OPERATOR.address), encode_address(DELEGATOR.address)
    with dev_node(tmp_path / "node") as url:
        send_included(url, OPERATOR, send_message(DELEGATOR.address, 50_000_000))
        delegated = send_included(url, DELEGATOR, MsgDelegate(validator=OPERATOR.address, amount=7_000_001))
        for amount in range(1, 6):  # fee-bearing blocks
            send_included(url, OPERATOR, send_message(SINK, amount))
        shares = int(query(url, f"/delegations/{delegator}")["delegations"][0]["shares"])
        validator = query(url, f"/validator/{operator}")
        total_shares = int(validator["delegator_shares"])
        before = int(query(url, f"/account/{delegator}")["balance"])
        withdrawn = send_included(url, DELEGATOR, MsgWithdrawRewards(validator=OPERATOR.address))
        after = int(query(url, f"/account/{delegator}")["balance"])
        events = reward_events(url, delegated.included.height, withdrawn.included.height - 1, operator)

    assert len(events) >= 5  # every send's fee paid in its block
    for event in events:
        share, commission = int(event["amount"]), int(event["commission"])
        assert commission == share * validator["commission_rate"] // 10_000
        assert commission + int(event["delegators"]) == share
    credited = sum(int(event["delegators"]) for event in events)
    expected = f1_payout(shares, total_shares, [credited])
    (paid,) = [int(e.get("amount")) for e in withdrawn.included.events if e.type == "withdraw_rewards"]
    (fee,) = [int(e.get("fee")) for e in withdrawn.included.events if e.type == "tx"]
    assert 0 < paid == expected
    assert after - before == paid - fee
