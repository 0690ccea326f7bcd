"""The market at scale: whole rounds of 1,000 live tasks, 10,000 workers and 100 validators, in process.

    python -m benchmarks.market_scale [--quick] [--tasks N] [--workers-per-task N] [--validators N]
                                      [--rounds N] [--profile KIND]

Drives the chain's state machine (`chain.app.apply_block` over an in-memory store with a sorted key index, as
`benchmarks.market_end_block` does) through the market's whole life at scale. Genesis funds one requester,
`--tasks x --workers-per-task` workers and `--validators` validators of equal stake (committees of the default
`committee_size` are drawn from them); the workers register, the requester submits every task (the spec of
`benchmarks.market_end_block`, `--rounds` training rounds, two segments sampled per worker) and each worker
joins one task, which starts when full. Then every round of every task runs in lockstep, in these blocks:

- commits: every worker's `MsgCommitRound` (the final report in the last round); its end block closes
  every task's round, since every member committed;
- sampling: an empty block whose end block draws every worker's segments and each segment's committee;
- verdicts: every committee member's PASS verdict on its segments (a validator's verdicts in transactions of
  `max_messages_per_tx` messages), but one per task, held back so that no task settles yet;
- settlement: the held-back verdict of each task; its end block settles every round (pays the workers, opens
  the reveal window, starts the next round; the final report's ends the task and refunds the requester);
- reveals: every voter's `MsgRevealReplay`;
- reveal settlement: an empty block at the reveal deadline, whose end block pays the held verifier fees.

Every transaction pays the default chain's minimum fee and is built and signed before any timing starts,
and its stateless checks (decoding, signature) are run then too, into the memo of passed checks
(`chain.checked_txs`) that the block is then executed with: that is what a validator's FinalizeBlock does
with transactions its CheckTx admitted (the signatures of a block it never saw cost it
`benchmarks.chain_throughput`'s ed25519 rate on top). The clock covers `apply_block` alone; the store's
app hash and disk write are `benchmarks.chain_throughput`'s subject. Garbage collection is tuned as the
node tunes it (`abci_app.gc_tuning`). Every transaction must succeed, and every round must settle with every
worker passed and paid, or the run fails.

State growth is the store's keys and bytes (keys plus values) after a training round's last block minus
before its first, in all and under each key prefix (`state_bytes_per_round_by_record`, by the prefix's name in
`chain.keys`: the round's votes are deleted when its reveal window closes, in the reveal settlement block). `--profile KIND` (commits, sampling, verdicts, settlement, reveals, reveal_settlement) prints
cProfile's top entries (CPU time) for that kind of block of the first round to stderr.
Target: the commits block, which carries one round of every task, executes in 1 s or less. The last line is
JSON: the scale, the CPU and wall-clock seconds of each kind of block (the largest over the rounds), the largest
block, the bytes of the commits and of a round's verdicts and reveals, the state growth per training round, the
one-minute load average, and whether the target was met in CPU seconds (`target_met`: on a shared machine the
wall clock also counts the other work's turns) and in wall-clock seconds (`target_met_wall_clock`).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import sys
import time
from dataclasses import dataclass, field

from google.protobuf.message import Message

from trolly.abci_app.gc_tuning import tune_garbage_collection
from trolly.chain.app import check_stateless
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.crypto import PrivateKey
from trolly.chain.market.params import MarketParams
from trolly.chain.market.records import VERDICT_PASS
from trolly.chain.market.reveals import replay_commitment
from trolly.chain.params import AuthParams
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.validators import StakingParams

from .market_scale_chain import ScaleChain, Scale

TARGET_SECONDS = 1.0
"""The issue's target for the block carrying one round of every task (the commits block)."""
BLOCK_KINDS = ("commits", "sampling", "verdicts", "settlement", "reveals", "reveal_settlement")
CPU_PROFILE = "torch-2.13.0+cpu/threads-1/isa-avx2/deterministic-ftz"
"""The determinism profile of the synthetic commitments: a CPU profile of the form the chain knows."""
INNER_STEPS, BATCH, CHECKPOINT_EVERY = 20, 8, 5
SALT = b"s" * 32


def digest(*parts: object) -> bytes:
    return hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()


@dataclass
class RoundFigures:
    """One round's blocks: wall-clock and CPU seconds per kind, transactions per kind, and the store's growth."""

    round: int
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    txs: dict[str, int] = field(default_factory=dict)
    tx_bytes: dict[str, int] = field(default_factory=dict)
    keys_added: int = 0
    bytes_added: int = 0
    keys_after: int = 0
    growth_by_record: dict[str, tuple[int, int]] = field(default_factory=dict)
    """(keys, bytes) added over the round under each key prefix that changed, by its name in `chain.keys`."""


class Rounds:
    """Builds, signs and pre-checks each block's transactions, then times the block on a `ScaleChain`."""

    def __init__(self, chain: ScaleChain, profile_kind: str | None) -> None:
        self.chain = chain
        self.memo = CheckedTxs(capacity_bytes=1 << 40)
        self.auth = chain.auth
        self.profile_kind = profile_kind

    def signed(self, key: PrivateKey, messages: list[Message]) -> list[bytes]:
        """`messages` from `key` in transactions of at most `max_messages_per_tx`, each paying the minimum fee."""
        per_tx = self.auth.max_messages_per_tx
        return [self.chain.sign(key, messages[start:start + per_tx]) for start in range(0, len(messages), per_tx)]

    def timed_block(self, kind: str, txs: list[bytes], figures: RoundFigures) -> None:
        for raw in txs:  # what CheckTx did when they reached the mempool
            check_stateless(raw, self.chain.chain_id, self.auth, self.memo)
        profiler = cProfile.Profile() if kind == self.profile_kind and figures.round == 0 else None
        figures.seconds[kind], figures.cpu_seconds[kind] = self.chain.block(txs, self.memo, profiler)
        self.memo.forget(txs)
        figures.txs[kind] = len(txs)
        figures.tx_bytes[kind] = sum(len(raw) for raw in txs)
        if profiler is not None:
            report = io.StringIO()
            pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(30)
            print(f"-- cProfile of the {kind} block of round 0 --\n{report.getvalue()}", file=sys.stderr)

    def run(self, round_: int) -> RoundFigures:
        chain, figures = self.chain, RoundFigures(round_)
        keys_before, bytes_before = chain.size()
        by_record_before = chain.size_by_record()
        final = round_ == chain.scale.rounds
        self.timed_block("commits", [chain.sign(w, [commit_message(t, round_, w, final)])
                                     for t, w in chain.members()], figures)
        self.timed_block("sampling", [], figures)
        votes = self.sampled_votes(round_)
        held = {task_id: by_task[-1] for task_id, by_task in group_by_task(votes).items()}
        held_set = {id(vote) for vote in held.values()}
        self.timed_block("verdicts", self.operator_txs([v for v in votes if id(v) not in held_set], verdict_message),
                         figures)
        self.timed_block("settlement", self.operator_txs(list(held.values()), verdict_message), figures)
        chain.check_settled(round_)
        self.timed_block("reveals", self.operator_txs(votes, reveal_message), figures)
        self.timed_block("reveal_settlement", [], figures)
        keys_after, bytes_after = chain.size()
        figures.keys_added, figures.bytes_added, figures.keys_after = (keys_after - keys_before,
                                                                       bytes_after - bytes_before, keys_after)
        figures.growth_by_record = growth(by_record_before, chain.size_by_record())
        return figures

    def sampled_votes(self, round_: int) -> list[tuple[PrivateKey, int, int, bytes, int]]:
        """(operator, task id, round, worker, segment) of every committee seat of the round's sampled segments."""
        operators = {key.address.hex(): key for key in self.chain.operators}
        votes = []
        for task_id, worker in self.chain.members():
            commitment = self.chain.commitment(task_id, round_, worker.address)
            for segment, committee in zip(commitment.segments, commitment.committees):
                votes.extend((operators[member], task_id, round_, worker.address, segment) for member in committee)
        return votes

    def operator_txs(self, votes, message) -> list[bytes]:
        """Each operator's `message` for each of its `votes` (`verdict_message` or `reveal_message`), signed."""
        txs = []
        for operator, messages in group_by_operator(votes, message).items():
            txs.extend(self.signed(operator, messages))
        return txs


def growth(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """(keys, bytes) added under each prefix between two `ScaleChain.size_by_record` readings, changed ones only."""
    changes = {}
    for name in sorted(set(before) | set(after)):
        (keys_before, bytes_before), (keys_after, bytes_after) = before.get(name, (0, 0)), after.get(name, (0, 0))
        if (keys_before, bytes_before) != (keys_after, bytes_after):
            changes[name] = (keys_after - keys_before, bytes_after - bytes_before)
    return changes


def group_by_task(votes) -> dict[int, list]:
    grouped: dict[int, list] = {}
    for vote in votes:
        grouped.setdefault(vote[1], []).append(vote)
    return grouped


def group_by_operator(votes, message) -> dict[PrivateKey, list[Message]]:
    grouped: dict[PrivateKey, list[Message]] = {}
    for vote in votes:
        grouped.setdefault(vote[0], []).append(message(*vote))
    return grouped


def replayed(task_id: int, round_: int, worker: bytes, segment: int) -> bytes:
    """The replay digest every honest verifier of this segment reveals."""
    return digest("replay", task_id, round_, worker.hex(), segment)


def verdict_message(operator: PrivateKey, task_id: int, round_: int, worker: bytes, segment: int) -> Message:
    return pb.MsgSubmitVerdict(task_id=task_id, round=round_, worker=worker, segment=segment, verdict=VERDICT_PASS,
                               evidence_hash=digest("evidence", task_id, segment),
                               replay_commitment=replay_commitment(operator.address, SALT,
                                                                   replayed(task_id, round_, worker, segment)))


def reveal_message(operator: PrivateKey, task_id: int, round_: int, worker: bytes, segment: int) -> Message:
    return pb.MsgRevealReplay(task_id=task_id, round=round_, worker=worker, segment=segment, salt=SALT,
                              replay_digest=replayed(task_id, round_, worker, segment))


def commit_message(task_id: int, round_: int, worker: PrivateKey, final: bool) -> Message:
    """A worker's synthetic commitment (hashes of labels, no training), or its final report."""
    label = worker.address.hex()
    start = digest("weights", task_id, round_)
    if final:
        return pb.MsgCommitRound(task_id=task_id, round=round_, start_weights_hash=start)
    return pb.MsgCommitRound(task_id=task_id, round=round_, update_hash=digest("update", label, round_),
                             samples_processed=INNER_STEPS * BATCH, steps=INNER_STEPS,
                             checkpoint_root=digest("root", label, round_),
                             residual_hash=digest("residual", label, round_),
                             num_checkpoints=-(-INNER_STEPS // CHECKPOINT_EVERY) + 1, start_weights_hash=start,
                             determinism_profile=CPU_PROFILE)


def worst(rounds: list[RoundFigures], clock: str) -> dict[str, float]:
    """The largest seconds of each kind of block over the rounds, on one clock (`seconds` or `cpu_seconds`)."""
    return {kind: max(getattr(r, clock)[kind] for r in rounds) for kind in BLOCK_KINDS}


def summary(scale: Scale, rounds: list[RoundFigures], load: float) -> dict:
    """The JSON line: the largest seconds of each kind of block over the rounds (wall-clock, and CPU: this
    process's, which the other work of a shared machine does not inflate), and growth per training round."""
    wall, cpu = worst(rounds, "seconds"), worst(rounds, "cpu_seconds")
    training = [r for r in rounds if r.round < scale.rounds] or rounds
    return {
        "tasks": scale.tasks, "workers": scale.tasks * scale.workers_per_task, "validators": scale.validators,
        "rounds": scale.rounds, "committee_size": scale.committee_size, "samples_per_worker": scale.samples,
        **{f"{kind}_block_seconds": round(wall[kind], 3) for kind in BLOCK_KINDS},
        **{f"{kind}_block_cpu_seconds": round(cpu[kind], 3) for kind in BLOCK_KINDS},
        "max_block_seconds": round(max(wall.values()), 3),
        "max_block_cpu_seconds": round(max(cpu.values()), 3),
        "verdict_txs_per_round": max(r.txs["verdicts"] + r.txs["settlement"] for r in rounds),
        "commit_txs_per_round": max(r.txs["commits"] for r in rounds),
        "commits_block_bytes": max(r.tx_bytes["commits"] for r in rounds),
        "verdict_bytes_per_round": max(r.tx_bytes["verdicts"] + r.tx_bytes["settlement"] for r in rounds),
        "reveal_bytes_per_round": max(r.tx_bytes["reveals"] for r in rounds),
        "state_keys_per_round": round(sum(r.keys_added for r in training) / len(training)),
        "state_bytes_per_round": round(sum(r.bytes_added for r in training) / len(training)),
        "state_keys_after_last_round": rounds[-1].keys_after,
        "state_bytes_per_round_by_record": {
            name: round(sum(r.growth_by_record.get(name, (0, 0))[1] for r in training) / len(training))
            for name in sorted({name for r in training for name in r.growth_by_record})},
        "load_average_1m": round(load, 2),
        "target_block_seconds": TARGET_SECONDS,
        "target_met": cpu["commits"] <= TARGET_SECONDS,
        "target_met_wall_clock": wall["commits"] <= TARGET_SECONDS,
    }


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 tasks, 1,000 workers, 20 validators")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--workers-per-task", type=int, default=10)
    parser.add_argument("--validators", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=1, help="training rounds per task (a final report follows)")
    parser.add_argument("--profile", choices=BLOCK_KINDS, default=None, help="cProfile this kind of block")
    args = parser.parse_args()
    limits = {"--tasks": (args.tasks, 1, None), "--rounds": (args.rounds, 1, None),
              "--workers-per-task": (args.workers_per_task, 1, MarketParams().max_workers),
              "--validators": (args.validators, 1, StakingParams().max_validators)}
    for flag, (value, low, high) in limits.items():
        if value is not None and (value < low or (high is not None and value > high)):
            parser.error(f"{flag} must be at least {low}" + (f" and at most {high}" if high is not None else ""))
    return args


def main() -> None:
    args = parse_arguments()
    scale = Scale(tasks=args.tasks or (100 if args.quick else 1_000), workers_per_task=args.workers_per_task,
                  validators=args.validators or (20 if args.quick else 100), rounds=args.rounds)
    started = time.perf_counter()
    chain = ScaleChain(scale, AuthParams())
    chain.open_tasks()
    tune_garbage_collection()
    print(f"{scale.tasks} tasks running after {time.perf_counter() - started:.1f} s of set-up", file=sys.stderr)
    runner = Rounds(chain, args.profile)
    rounds = []
    for round_ in range(scale.rounds + 1):
        rounds.append(runner.run(round_))
        done = rounds[-1]
        print(f"round {round_} (wall s / CPU s): " + ", ".join(f"{k} {v:.3f}/{done.cpu_seconds[k]:.3f}"
                                                               for k, v in done.seconds.items())
              + f"; +{done.keys_added} keys, +{done.bytes_added} bytes", file=sys.stderr)
    chain.check_completed()
    print(json.dumps(summary(scale, rounds, os.getloadavg()[0])))


if __name__ == "__main__":
    main()
