"""The node's own metrics (docs/operations.md, "Metrics"): what the app executed, read from each block's
results and events at its Commit, in a registry of its own that `trolly-node start` serves.

The chain stays pure: it only emits events, as it does for clients; this adapter counts them (rounds settled,
verdicts by outcome, slashes by reason) and keeps the tasks-by-status gauge from them. Counting waits for
Commit: a block that FinalizeBlock executed but CometBFT re-sends after a crash is counted once, when it is
committed. Every label takes its values from a bounded set (the chain's message routes, its error codes, its
event names), never from what a transaction's bytes choose.

Tasks by status: counted once from the store when the app starts (`recount_tasks`), then kept by reading only
the tasks a block's events name. Task ids only grow, so a named task above the highest id counted is new; a
task below it that is no longer live was counted under its final status already.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from trolly.chain.app import MESSAGE_ROUTES
from trolly.chain.block import Event, TxResult
from trolly.chain.market.records import LIVE_STATUSES, VERDICT_NAMES
from trolly.chain.market.store import find_task, iterate_tasks
from trolly.chain.proto import tx_pb2
from trolly.chain.state import State

TASK_STATUSES = ("open", "running", "completed", "cancelled", "expired", "abandoned")
"""`chain.market.records`' task statuses, each a series of `trolly_tasks` (zero until a task has it)."""

SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Histogram buckets from a millisecond (an empty block) to a minute (a snapshot of a large state)."""

VALIDATOR_SLASH_KINDS = {"1": "duplicate_vote", "2": "light_client_attack"}
"""A validator `slash` event without a `reason`: the kind of CometBFT misbehavior evidence it punished."""
STAKE_PENALTIES = ("lazy_verifier", "absent_verifier", "losing_verdict")
"""Market task events that burn a validator's stake for how it voted; their action is the reason."""


def message_label(raw: bytes) -> str:
    """A transaction's first message type, short (`MsgSend`), if the chain routes it; else what it is instead.

    The label set stays the chain's own: `none` (no message), `undecodable`, `unknown` (a type no module routes).
    """
    try:
        body = tx_pb2.TxBody.FromString(tx_pb2.Tx.FromString(raw).body_bytes)
    except Exception:  # noqa: BLE001 - any bytes may arrive; the result code already says what was wrong
        return "undecodable"
    if not body.messages:
        return "none"
    type_url = body.messages[0].type_url
    return type_url.rsplit(".", 1)[-1] if type_url in MESSAGE_ROUTES else "unknown"


@dataclass
class BlockTally:
    """What one block's events say that the metrics count."""

    rounds_settled: int = 0
    verdicts: collections.Counter = field(default_factory=collections.Counter)
    slashes: collections.Counter = field(default_factory=collections.Counter)
    tasks_named: set[int] = field(default_factory=set)


def tally_events(events: list[Event]) -> BlockTally:
    """Count the events of a block (its transactions' and its own) by what the metrics show."""
    tally = BlockTally()
    for event in events:
        attributes = dict(event.attributes)
        if event.type in ("slash", "validator_slash"):  # a validator punished by the staking side
            tally.slashes[attributes.get("reason") or VALIDATOR_SLASH_KINDS.get(attributes.get("kind", ""), "other")] += 1
        if event.type != "task":
            continue
        if attributes.get("id", "").isdigit():
            tally.tasks_named.add(int(attributes["id"]))
        action = attributes.get("action", "")
        if action == "round_settled":
            tally.rounds_settled += 1
        elif action == "verdict":
            verdict = attributes.get("verdict", "")
            tally.verdicts[verdict if verdict in VERDICT_NAMES.values() else "other"] += 1
        elif action == "verdict_late":
            tally.verdicts["late"] += 1
        elif action == "slash":  # a worker's collateral, for a failed verification
            tally.slashes["verification_failed"] += 1
        elif action in STAKE_PENALTIES:
            tally.slashes[action] += 1
    return tally


@dataclass
class _FinalizedBlock:
    transactions: list[tuple[str, str, str]]
    tally: BlockTally


class AppMetrics:
    """The app's metrics and the registry they are served from (one per app: tests build several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.transactions = Counter("trolly_transactions", "Transactions committed, by their first message's type "
                                    "and their result (codespace and code; 0 is success)",
                                    ["message", "codespace", "code"], registry=registry)
        self.block_execution_seconds = Histogram(
            "trolly_block_execution_seconds", "Seconds FinalizeBlock took: the block executed and its app hash computed",
            buckets=SECONDS_BUCKETS, registry=registry)
        self.height = Gauge("trolly_app_height", "The last height the app committed", registry=registry)
        self.tasks = Gauge("trolly_tasks", "Training tasks on chain by status", ["status"], registry=registry)
        self.rounds_settled = Counter("trolly_rounds_settled", "Training rounds settled (paid or refunded)",
                                      registry=registry)
        self.verdicts = Counter("trolly_verdicts", "Validators' verdicts on sampled segments by outcome (pass, "
                                "fail, unavailable; late: after the segment was decided)", ["outcome"],
                                registry=registry)
        self.slashes = Counter("trolly_slashes", "Slashes and stake penalties by reason", ["reason"],
                               registry=registry)
        self.snapshot_seconds = Histogram("trolly_snapshot_seconds", "Seconds taken to write one state-sync snapshot",
                                          buckets=SECONDS_BUCKETS, registry=registry)
        self.prune_seconds = Histogram("trolly_prune_seconds", "Seconds taken to delete the store's old versions "
                                       "at one Commit", buckets=SECONDS_BUCKETS, registry=registry)
        for status in TASK_STATUSES:
            self.tasks.labels(status)
        self._finalized: _FinalizedBlock | None = None
        self._task_counts: collections.Counter = collections.Counter()
        self._live: dict[int, str] = {}
        self._highest_task = 0

    # -- a block -----------------------------------------------------------------------------------------------
    def block_finalized(self, txs: list[bytes], results: list[TxResult], events: list[Event], started: float) -> None:
        """FinalizeBlock executed `txs` (their `results` in order) with the block's own `events`, beginning at
        `started` (`time.perf_counter()`): its time is observed now, what it did is counted at its Commit."""
        self.block_execution_seconds.observe(time.perf_counter() - started)
        transactions = [(message_label(raw), result.codespace, str(result.code)) for raw, result in zip(txs, results)]
        every_event = list(events)
        for result in results:
            every_event.extend(result.events)
        self._finalized = _FinalizedBlock(transactions, tally_events(every_event))

    def block_committed(self, height: int, committed: State) -> None:
        """The last finalized block is committed: count it, and update the tasks it named from `committed`."""
        block, self._finalized = self._finalized, None
        self.height.set(height)
        if block is None:
            return
        for labels in block.transactions:
            self.transactions.labels(*labels).inc()
        tally = block.tally
        self.rounds_settled.inc(tally.rounds_settled)
        for outcome, count in tally.verdicts.items():
            self.verdicts.labels(outcome).inc(count)
        for reason, count in tally.slashes.items():
            self.slashes.labels(reason).inc(count)
        self._update_tasks(committed, tally.tasks_named)

    # -- tasks by status ---------------------------------------------------------------------------------------
    def recount_tasks(self, committed: State) -> None:
        """Count every task of `committed` afresh: at start, and after anything replaced the state wholesale (a
        state-sync restore)."""
        self._task_counts = collections.Counter()
        self._live = {}
        self._highest_task = 0
        for task in iterate_tasks(committed):
            self._count_task(task.id, task.status)
        self._publish_tasks()

    def _update_tasks(self, committed: State, named: set[int]) -> None:
        for task_id in sorted(named):
            if task_id > self._highest_task:
                task = find_task(committed, task_id)
                if task is not None:
                    self._count_task(task_id, task.status)
            elif task_id in self._live:
                task = find_task(committed, task_id)
                if task is not None and task.status != self._live[task_id]:
                    self._task_counts[self._live.pop(task_id)] -= 1
                    self._count_task(task_id, task.status)
        if named:
            self._publish_tasks()

    def _count_task(self, task_id: int, status: str) -> None:
        self._task_counts[status] += 1
        self._highest_task = max(self._highest_task, task_id)
        if status in LIVE_STATUSES:
            self._live[task_id] = status

    def _publish_tasks(self) -> None:
        for status in sorted(set(TASK_STATUSES) | set(self._task_counts)):
            self.tasks.labels(status).set(self._task_counts[status])
