"""Delegation cost per block: crediting fees must not depend on how many delegators a validator has.

    python -m benchmarks.delegation [--quick]

Builds two chains over in-memory stores with a sorted key index (prefix scans cost O(log n + matches), as in
LevelDB): 4 validators and 10 delegators, and 4 validators and 10,000 delegators (spread over the validators;
their delegations written with the same verb MsgDelegate runs, `delegating.delegate`, so the setup signs
nothing). On each, times blocks that carry one fee-paying transfer, so every block's end credits fees to every
validator (commission to the operator, the rest to its delegators' F1 rewards period): the whole `apply_block`,
and the fee distribution alone, medians. Then one delegator withdraws its rewards, to show a withdrawal pays the
exact amount its shares earned whatever the number of others. F1 credits one record per validator, so both
chains should cost about the same; a payout that visited every delegation would make the second grow a thousand
fold. The last line is JSON:
`{"delegators_small": 10, "delegators_large": 10000, "block_seconds_10": x, "block_seconds_10000": y,
  "ratio": y/x, "distribution_seconds_10": a, "distribution_seconds_10000": b, "distribution_ratio": b/a}`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import statistics
import time

from benchmarks.market_end_block import SortedKV
from trolly.chain.accounts import move_funds
from trolly.chain.ante import FEE_COLLECTOR
from trolly.chain.app import apply_block, init_chain
from trolly.chain.block import BlockContext, BlockEnv
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.delegating import delegate
from trolly.chain.modules.distribution import distribute_fees
from trolly.chain.params import AuthParams
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.proto.distribution_pb2 import MsgWithdrawRewards
from trolly.chain.state import State
from trolly.wallet.txbuilder import TxPlan

CHAIN_ID = "trolly-bench"
AUTH = AuthParams()
VALIDATORS = 4
DELEGATION = 2_000_000
"""utrl each delegator delegates."""


def key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(name.encode()).digest())


class DelegationChain:
    """A chain with VALIDATORS validators and `delegators` delegations spread over them."""

    def __init__(self, delegators: int) -> None:
        self.payer = key("payer")
        self.operators = [key(f"operator-{i}") for i in range(VALIDATORS)]
        self.delegators = [key(f"delegator-{i}") for i in range(delegators)]
        self.kv = SortedKV()
        accounts = [self.payer, *self.operators, *self.delegators]
        app_state = {
            "accounts": [{"address": encode_address(k.address), "balance": str(10**13)} for k in accounts],
            "validators": [{"operator": encode_address(o.address), "moniker": f"v{i}", "stake": "10000000",
                            "pub_key": base64.b64encode(key(f"consensus-{i}").pubkey).decode()}
                           for i, o in enumerate(self.operators)],
        }
        state = State(self.kv)
        init_chain(state, self.env(1), app_state)
        ctx = BlockContext(self.env(1), record_events=False)
        for index, delegator in enumerate(self.delegators):
            delegate(state, ctx, delegator.address, self.operators[index % VALIDATORS].address, DELEGATION)
        self.kv.apply(state.changes())
        self.height, self.nonces = 0, {}

    def env(self, height: int) -> BlockEnv:
        return BlockEnv(CHAIN_ID, height, height * 10**9, block_hash=hashlib.sha256(height.to_bytes(8, "big")).digest())

    def tx(self, signer: PrivateKey, message) -> bytes:
        nonce = self.nonces.get(signer.address, 0)
        self.nonces[signer.address] = nonce + 1
        return TxPlan(CHAIN_ID, nonce, 0, (message,)).with_minimum_fee(AUTH.min_fee, AUTH.fee_per_byte).sign(signer)

    def block(self, txs: list[bytes]) -> tuple[float, object]:
        self.height += 1
        state = State(self.kv)
        started = time.perf_counter()
        output = apply_block(state, self.env(self.height), txs)
        elapsed = time.perf_counter() - started
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results if not r.ok][:3]
        self.kv.apply(state.changes())
        return elapsed, output

    def fee_block(self) -> float:
        return self.block([self.tx(self.payer, MsgSend(to=self.operators[0].address, amount=1))])[0]

    def distribution_seconds(self) -> float:
        """The fee distribution alone, on a scratch state whose fee collector holds a block's fees."""
        state = State(self.kv)
        ctx = BlockContext(self.env(self.height + 1))
        move_funds(state, self.payer.address, FEE_COLLECTOR, 1_000_003)
        started = time.perf_counter()
        distribute_fees(state, ctx)
        return time.perf_counter() - started

    def withdraw(self) -> int:
        """One delegator withdraws; returns what it was paid."""
        _, output = self.block([self.tx(self.delegators[0], MsgWithdrawRewards(validator=self.operators[0].address))])
        return sum(int(dict(e.attributes)["amount"]) for r in output.tx_results for e in r.events
                   if e.type == "withdraw_rewards")


def measure(delegators: int, blocks: int) -> dict:
    chain = DelegationChain(delegators)
    block = statistics.median(chain.fee_block() for _ in range(blocks))
    distribution = statistics.median(chain.distribution_seconds() for _ in range(blocks))
    paid = chain.withdraw()
    if paid <= 0:
        raise SystemExit(f"a delegator of the {delegators}-delegator chain was paid nothing")
    return {"block": block, "distribution": distribution}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timed blocks (the delegator counts stay)")
    parser.add_argument("--blocks", type=int, default=None, help="fee-paying blocks timed per chain")
    args = parser.parse_args()
    blocks = args.blocks or (20 if args.quick else 200)
    small, large = measure(10, blocks), measure(10_000, blocks)
    result = {
        "delegators_small": 10, "delegators_large": 10_000,
        "block_seconds_10": round(small["block"], 6), "block_seconds_10000": round(large["block"], 6),
        "ratio": round(large["block"] / small["block"], 3),
        "distribution_seconds_10": round(small["distribution"], 6),
        "distribution_seconds_10000": round(large["distribution"], 6),
        "distribution_ratio": round(large["distribution"] / small["distribution"], 3),
        "blocks": blocks,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
