"""Market end-block cost: it must depend on the work due at a height, not on how many tasks exist.

    python -m benchmarks.market_end_block [--quick]

Builds two chains over in-memory stores: a baseline with 10 idle tasks and one with `--idle` idle tasks
(10,000; 1,000 with --quick), all waiting for workers with a join deadline far away. On both, times empty
blocks (every module's begin/end-block, the market's included) and reports the median. Then, on the big
chain, times a block in which `--due` tasks (100) reach their join deadline together and expire (each
refunds its requester): the cost per due task. Stores are in memory with a sorted key index (prefix scans
cost O(log n + matches), as in LevelDB). Target: an empty block with many idle tasks costs about what it
costs with 10 (both are tens of microseconds, so the ratio is noisy; a scan over all tasks would make it
grow with `--idle`). The last line is JSON:
`{"idle_tasks": N, "empty_block_ms_baseline": x, "empty_block_ms_idle": y, "ratio": y/x,
  "expire_ms_per_task": z, "due_tasks": D}`.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import hashlib
import json
import statistics
import time

from trolly.chain import keys
from trolly.chain.app import apply_block, init_chain
from trolly.chain.block import BlockEnv
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.state import MemoryKV, State
from trolly.chain.params import AuthParams
from trolly.wallet.txbuilder import TxPlan

CHAIN_ID = "trolly-bench"
AUTH = AuthParams()
"""The default chain's fee rule: every transaction pays its minimum fee."""
SPEC = json.dumps({
    "version": 1, "model": {"arch": "mlp"}, "dataset": {"name": "digits", "manifest_hash": "ab" * 32},
    "training": {"rounds": 2, "inner_steps": 20, "batch_size": 8, "checkpoint_every": 5, "seed": 1},
    "codec": "topk-int8",
}).encode()
PER_TX = 32  # the default max_messages_per_tx


class SortedKV(MemoryKV):
    """A committed store with a sorted key index, so a prefix scan costs O(log n + matches) as in LevelDB
    (MemoryKV sorts every key on each scan, which would measure the test store instead of the market)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[bytes] = []

    def iterate(self, prefix: bytes):
        i = bisect.bisect_left(self.keys, prefix)
        while i < len(self.keys) and self.keys[i].startswith(prefix):
            yield self.keys[i], self.items[self.keys[i]]
            i += 1

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            present = key in self.items
            if value is None:
                if present:
                    del self.items[key]
                    self.keys.pop(bisect.bisect_left(self.keys, key))
            else:
                if not present:
                    bisect.insort(self.keys, key)
                self.items[key] = value


def key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(name.encode()).digest())


class BenchChain:
    def __init__(self) -> None:
        self.requester, self.operator, self.consensus = key("requester"), key("operator"), key("consensus")
        self.kv = SortedKV()
        state = State(self.kv)
        app_state = {
            "accounts": [{"address": encode_address(k.address), "balance": str(10**15)}
                         for k in (self.requester, self.operator)],
            "validators": [{"operator": encode_address(self.operator.address), "moniker": "v", "stake": "10000000",
                            "pub_key": base64.b64encode(self.consensus.pubkey).decode()}],
        }
        init_chain(state, self.env(1), app_state)
        self.kv.apply(state.changes())
        self.height, self.nonce = 0, 0

    def env(self, height: int) -> BlockEnv:
        return BlockEnv(CHAIN_ID, height, height * 10**9, block_hash=hashlib.sha256(height.to_bytes(8, "big")).digest())

    def block(self, txs: list[bytes]) -> float:
        self.height += 1
        state = State(self.kv)
        started = time.perf_counter()
        output = apply_block(state, self.env(self.height), txs)
        elapsed = time.perf_counter() - started
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results if not r.ok][:3]
        self.kv.apply(state.changes())
        return elapsed

    def submit_tasks(self, count: int, join_blocks: int) -> None:
        message = pb.MsgSubmitTask(spec=SPEC, spec_hash=hashlib.sha256(SPEC).digest(), budget=2_100_000, workers=2,
                                   rounds=2, reward_per_round=1_000_000, collateral=4_000_000,
                                   join_blocks=join_blocks, round_blocks=10, samples_per_worker=2)
        txs = []
        for start in range(0, count, PER_TX):
            plan = TxPlan(CHAIN_ID, self.nonce, 0, (message,) * min(PER_TX, count - start))
            txs.append(plan.with_minimum_fee(AUTH.min_fee, AUTH.fee_per_byte).sign(self.requester))
            self.nonce += 1
        self.block(txs)


def median_empty_block_ms(chain: BenchChain, blocks: int) -> float:
    return statistics.median(chain.block([]) for _ in range(blocks)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 idle tasks instead of 10,000")
    parser.add_argument("--idle", type=int, default=None, help="idle tasks on the big chain")
    parser.add_argument("--due", type=int, default=100, help="tasks expiring in the measured block")
    parser.add_argument("--blocks", type=int, default=200, help="empty blocks timed per chain")
    args = parser.parse_args()
    idle = args.idle or (1_000 if args.quick else 10_000)

    baseline = BenchChain()
    baseline.submit_tasks(10, join_blocks=100_000)
    baseline_ms = median_empty_block_ms(baseline, args.blocks)

    big = BenchChain()
    big.submit_tasks(idle, join_blocks=100_000)
    big.submit_tasks(args.due, join_blocks=args.blocks + 1)  # due in the block after the empty ones
    idle_ms = median_empty_block_ms(big, args.blocks)
    live_before = sum(1 for _ in big.kv.iterate(keys.MARKET_OPEN_TASK))
    expire_ms = (big.block([]) * 1000 - idle_ms) / args.due
    live_after = sum(1 for _ in big.kv.iterate(keys.MARKET_OPEN_TASK))
    if live_before - live_after != args.due:
        raise SystemExit(f"expected {args.due} tasks to expire, {live_before - live_after} did")
    result = {"idle_tasks": idle, "empty_block_ms_baseline": round(baseline_ms, 3),
              "empty_block_ms_idle": round(idle_ms, 3), "ratio": round(idle_ms / baseline_ms, 3),
              "expire_ms_per_task": round(expire_ms, 3), "due_tasks": args.due}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
