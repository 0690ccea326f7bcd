"""Reading a validator's fee rewards back from a node's `block_results` (CometBFT's, or the solo engine's, which
serves the same JSON), and the F1 payout they imply (docs/protocol.md section 5.3), for the real-process checks that
what MsgWithdrawRewards pays is exactly the delegator's share of what the chain said it distributed."""

from __future__ import annotations

from dataclasses import dataclass, field

from trolly.chain.proto.distribution_pb2 import MsgWithdrawRewards
from trolly.chain.proto.staking_pb2 import MsgBond, MsgDelegate, MsgRedelegate, MsgUndelegate
from trolly.chain.rewards import REWARD_RATIO_SCALE
from trolly.wallet.rpc import RpcClient

DELEGATION_MESSAGES = frozenset("/" + m.DESCRIPTOR.full_name for m in (
    MsgBond, MsgDelegate, MsgUndelegate, MsgRedelegate, MsgWithdrawRewards))
"""The messages that end a validator's rewards period (section 5.3), as their `message` events' `action`."""


def attributes(event: dict) -> dict:
    return {a["key"]: a["value"] for a in event["attributes"]}


@dataclass
class BlockEvents:
    """One height's events from `block_results`: each transaction's (type, attributes) and the block's own."""

    height: int
    txs: list[list[tuple[str, dict]]] = field(default_factory=list)
    block: list[tuple[str, dict]] = field(default_factory=list)

    def of_block(self, kind: str) -> list[dict]:
        return [a for t, a in self.block if t == kind]

    def of_txs(self, kind: str) -> list[dict]:
        return [a for tx in self.txs for t, a in tx if t == kind]


def block_events(url: str, first: int, last: int) -> list[BlockEvents]:
    """The events of heights first..last, read from `block_results`."""
    blocks = []
    with RpcClient(url, timeout=10) as client:
        for height in range(first, last + 1):
            results = client.call("block_results", height=str(height))
            txs = [[(e["type"], attributes(e)) for e in result.get("events") or []]
                   for result in results.get("txs_results") or []]
            block = [(e["type"], attributes(e)) for e in results.get("finalize_block_events") or []]
            blocks.append(BlockEvents(height, txs, block))
    return blocks


def reward_events(url: str, first: int, last: int, operator: str) -> list[dict]:
    """The `reward` events of `operator` in the FinalizeBlock results of heights first..last, as attribute dicts."""
    return [event for block in block_events(url, first, last) for event in block.of_block("reward")
            if event.get("operator") == operator]


def f1_payout(shares: int, total_shares: int, period_rewards: list[int]) -> int:
    """What a delegation of `shares` (of `total_shares`, unchanged throughout) is paid for the periods whose
    delegators' rewards are `period_rewards`: each period's ratio step rounded down, the payment rounded down."""
    ratio = sum(rewards * REWARD_RATIO_SCALE // total_shares for rewards in period_rewards)
    return shares * ratio // REWARD_RATIO_SCALE
