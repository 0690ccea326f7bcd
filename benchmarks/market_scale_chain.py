"""The chain `benchmarks.market_scale` drives: genesis for many workers and validators, their tasks opened, and
blocks executed over an in-memory store whose size is counted as it changes.

Keys are derived from names (`key`), so every run signs the same bytes; nonces are counted here, since every
transaction a block carries succeeds (the chain checks that after each block).
"""

from __future__ import annotations

import base64
import bisect
import cProfile
import hashlib
import json
import time
from dataclasses import dataclass

from google.protobuf.message import Message

from trolly.chain import keys
from trolly.chain.app import apply_block, init_chain
from trolly.chain.block import BlockEnv
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.market.records import COMPLETED, PASSED, RUNNING, Commitment, Task, decode_record
from trolly.chain.params import AuthParams
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.state import State
from trolly.wallet.txbuilder import TxPlan

from .market_end_block import SortedKV

CHAIN_ID = "trolly-scale"
STAKE = 10_000_000
"""Each validator's genesis stake: equal powers, so committees are drawn evenly."""
FUNDS = 10**13
REWARD, COLLATERAL, WORKER_STAKE = 1_000_000, 2_000_000, 1_000_000
REVEAL_WINDOW = 2
"""Blocks of the reveal window: its deadline falls in the block after the reveals, the round's last."""


PREFIX_NAMES = {value: name.lower() for name, value in vars(keys).items()
                if name.isupper() and isinstance(value, bytes) and len(value) == 1}
"""The name of each one-byte key prefix of the chain (`chain.keys`): `market_verdict`, `market_commit`, ..."""


@dataclass(frozen=True)
class Scale:
    tasks: int
    workers_per_task: int
    validators: int
    rounds: int
    committee_size: int = 7
    samples: int = 2


def key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"trolly/market-scale/" + name.encode()).digest())


def spec(rounds: int) -> bytes:
    return json.dumps({
        "version": 1, "model": {"arch": "mlp"}, "dataset": {"name": "digits", "manifest_hash": "ab" * 32},
        "training": {"rounds": rounds, "inner_steps": 20, "batch_size": 8, "checkpoint_every": 5, "seed": 1},
        "codec": "topk-int8",
    }).encode()


class CountingKV(SortedKV):
    """A `SortedKV` that counts its keys and bytes (keys plus values), in all and by key prefix (`growth`), and
    rebuilds its sorted index at once when a block adds or deletes many keys (inserting or removing them one by
    one would cost this benchmark, not the chain, minutes)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.by_prefix: dict[bytes, list[int]] = {}
        """First byte of the key -> [keys, bytes] under it."""

    def count(self, name: bytes, value: bytes, sign: int) -> None:
        self.bytes += sign * (len(name) + len(value))
        counts = self.by_prefix.setdefault(name[:1], [0, 0])
        counts[0] += sign
        counts[1] += sign * (len(name) + len(value))

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        added, deleted = [], []
        for name, value in changes.items():
            old = self.items.get(name)
            if old is not None:
                self.count(name, old, -1)
            if value is None:
                if old is not None:
                    del self.items[name]
                    deleted.append(name)
                continue
            if old is None:
                added.append(name)
            self.items[name] = value
            self.count(name, value, 1)
        if len(added) + len(deleted) > 1_000:
            self.keys = sorted(self.items)
            return
        for name in deleted:
            self.keys.pop(bisect.bisect_left(self.keys, name))
        for name in added:
            bisect.insort(self.keys, name)


class ScaleChain:
    """Genesis with `scale`'s requester, workers and validators; `block` executes and commits one block."""

    def __init__(self, scale: Scale, auth: AuthParams) -> None:
        self.scale, self.auth, self.chain_id = scale, auth, CHAIN_ID
        self.requester = key("requester")
        self.workers = [key(f"worker-{i}") for i in range(scale.tasks * scale.workers_per_task)]
        self.operators = [key(f"operator-{i}") for i in range(scale.validators)]
        self.nonces: dict[bytes, int] = {}
        self.task_ids: list[int] = []
        self.kv = CountingKV()
        genesis = State(self.kv)
        init_chain(genesis, self.env(1), self.app_state())
        self.kv.apply(genesis.changes())
        self.height = 0

    def app_state(self) -> dict:
        funded = [self.requester, *self.workers, *self.operators]
        return {
            "params": {"market": {"min_worker_stake": WORKER_STAKE, "min_collateral": COLLATERAL // 2,
                                  "reveal_window": REVEAL_WINDOW, "committee_size": self.scale.committee_size}},
            "accounts": [{"address": encode_address(k.address), "balance": str(FUNDS)} for k in funded],
            "validators": [{"operator": encode_address(k.address), "moniker": f"v{i}", "stake": str(STAKE),
                            "pub_key": base64.b64encode(key(f"consensus-{i}").pubkey).decode()}
                           for i, k in enumerate(self.operators)],
        }

    def env(self, height: int) -> BlockEnv:
        return BlockEnv(CHAIN_ID, height, height * 10**9, block_hash=hashlib.sha256(height.to_bytes(8, "big")).digest())

    # -- transactions and blocks ---------------------------------------------------------------------------------
    def sign(self, signer: PrivateKey, messages: list[Message]) -> bytes:
        """A transaction of `messages` paying the minimum fee, at the signer's next nonce."""
        nonce = self.nonces.get(signer.address, 0)
        self.nonces[signer.address] = nonce + 1
        plan = TxPlan(CHAIN_ID, nonce, 0, tuple(messages))
        return plan.with_minimum_fee(self.auth.min_fee, self.auth.fee_per_byte).sign(signer)

    def block(self, txs: list[bytes], memo: CheckedTxs | None = None,
              profiler: cProfile.Profile | None = None) -> tuple[float, float]:
        """Execute and commit the next block; returns the (wall-clock, CPU) seconds `apply_block` took. Every
        transaction must succeed."""
        self.height += 1
        state = State(self.kv)
        env = self.env(self.height)
        if profiler is not None:
            profiler.enable()
        started, cpu_started = time.perf_counter(), time.process_time()
        output = apply_block(state, env, txs, memo)
        elapsed = time.perf_counter() - started, time.process_time() - cpu_started
        if profiler is not None:
            profiler.disable()
        failed = [r.log for r in output.tx_results if not r.ok]
        if failed:
            raise SystemExit(f"{len(failed)} transactions failed at height {self.height}, the first: {failed[0]}")
        self.kv.apply(state.changes())
        return elapsed

    def size(self) -> tuple[int, int]:
        """(keys, bytes) in the committed store."""
        return len(self.kv.items), self.kv.bytes

    def size_by_record(self) -> dict[str, tuple[int, int]]:
        """(keys, bytes) in the committed store under each key prefix, by the prefix's name in `chain.keys`."""
        return {PREFIX_NAMES.get(prefix, prefix.hex()): (count, size)
                for prefix, (count, size) in sorted(self.kv.by_prefix.items())}

    # -- setting up ----------------------------------------------------------------------------------------------
    def open_tasks(self) -> None:
        """Register every worker, submit every task, and have each task's workers join it: all running."""
        hardware = pb.HardwareProfile(device="cpu", samples_per_second=100, memory_mb=1024, threads=1)
        self.block([self.sign(w, [pb.MsgRegisterWorker(stake=WORKER_STAKE, blob_url=f"http://10.0.0.1:{9000 + i % 999}",
                                                       hardware=hardware)]) for i, w in enumerate(self.workers)])
        rounds = self.scale.rounds
        body = spec(rounds)
        message = pb.MsgSubmitTask(spec=body, spec_hash=hashlib.sha256(body).digest(), budget=2 * (rounds + 1) * REWARD,
                                   workers=self.scale.workers_per_task, rounds=rounds, reward_per_round=REWARD,
                                   collateral=COLLATERAL, join_blocks=10, round_blocks=20,
                                   samples_per_worker=self.scale.samples)
        per_tx = self.auth.max_messages_per_tx
        first = self.next_task_id()
        self.block([self.sign(self.requester, [message] * min(per_tx, self.scale.tasks - start))
                    for start in range(0, self.scale.tasks, per_tx)])
        self.task_ids = list(range(first, first + self.scale.tasks))
        self.block([self.sign(w, [pb.MsgJoinTask(task_id=t)]) for t, w in self.members()])
        if any(self.task(t).status != RUNNING for t in self.task_ids):
            raise SystemExit("not every task started")

    def next_task_id(self) -> int:
        raw = self.kv.get(keys.MARKET_NEXT_TASK_ID)
        return int.from_bytes(raw, "big") if raw else 1

    def members(self) -> list[tuple[int, PrivateKey]]:
        """(task id, worker key) of every member: worker i is a member of the i // workers_per_task-th task."""
        return [(self.task_ids[i // self.scale.workers_per_task], w) for i, w in enumerate(self.workers)]

    # -- reading and checking ------------------------------------------------------------------------------------
    def task(self, task_id: int) -> Task:
        return decode_record(Task, self.kv.get(keys.market_task_key(task_id)))

    def commitment(self, task_id: int, round_: int, worker: bytes) -> Commitment:
        return decode_record(Commitment, self.kv.get(keys.market_commit_key(task_id, round_, worker)))

    def check_settled(self, round_: int) -> None:
        """Every worker's round passed, and (a training round) every task is on to the next round."""
        for task_id, worker in self.members():
            if self.commitment(task_id, round_, worker.address).outcome != PASSED:
                raise SystemExit(f"round {round_} of task {task_id} did not pass for every worker")
        if round_ < self.scale.rounds and any(self.task(t).round != round_ + 1 for t in self.task_ids):
            raise SystemExit(f"not every task started round {round_ + 1}")

    def check_completed(self) -> None:
        if any(self.task(t).status != COMPLETED for t in self.task_ids):
            raise SystemExit("not every task completed")
