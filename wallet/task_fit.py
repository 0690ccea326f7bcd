"""Why no worker joined a task: each requirement of its spec against what each registered worker measured.

A requester whose task sits open wants to know what to change. The chain holds what is needed to say it: the
spec (its memory estimate by the chain's own footprint, `chain.market.footprint`, and the threads it trains
with), the task's collateral, and every registered worker's hardware record as that worker measured it
(`trolly-worker preflight`: memory, cores, speed), its balance and how many tasks it is in. Each worker is
checked against each requirement here, as the worker itself checks before it joins; what only a worker can
check (its instruction set, a pinned base model installed) is named as such. Registered workers are found by the
`worker.action='registered'` events of the node's transaction index, then read one by one.
"""

from __future__ import annotations

import dataclasses
import json

from trolly.chain.errors import NotFound
from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.footprint import spec_footprint
from trolly.chain.market.params import MarketParams
from trolly.chain.market.records import OPEN, RUNNING
from trolly.chain.market.spec import parse_spec

from .errors import QueryFailed
from .market_queries import get_market_params, get_spec, get_task_overview, get_worker
from .market_views import TaskOverview, WorkerRecord
from .rpc import AsyncRpcClient
from .sender import fetch_account

PAGE = 100


@dataclasses.dataclass(frozen=True)
class Requirements:
    """What a worker must have to join the task, as the chain can tell."""

    memory_mb: int
    """The spec's memory estimate (the chain's footprint of its model and batch)."""
    threads: int
    collateral: int
    max_tasks: int
    """A worker already in this many tasks cannot join another (`max_tasks_per_worker`)."""
    checked_by_worker: tuple[str, ...]
    """Requirements the chain cannot see, which each worker checks itself before joining."""


@dataclasses.dataclass(frozen=True)
class WorkerFit:
    address: str
    device: str
    memory_mb: int
    threads: int
    samples_per_second: int
    balance: int
    tasks: int
    shortfalls: tuple[str, ...]
    """Each requirement this worker does not meet, in words; empty: it fits."""


@dataclasses.dataclass(frozen=True)
class NoJoinReport:
    task_id: int
    status: str
    workers_joined: int
    workers_wanted: int
    open_slots: int
    """Places of members who left a running task, which replacements may take (`active_members` short of wanted)."""
    requirements: Requirements
    workers: tuple[WorkerFit, ...]

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        needs = self.requirements
        lines = [f"task {self.task_id}: {self.status}, {self.workers_joined} of {self.workers_wanted} worker(s) "
                 f"joined",
                 f"it needs: memory {needs.memory_mb} MiB (estimate), {needs.threads} thread(s), collateral "
                 f"{needs.collateral} utrl in the balance, fewer than {needs.max_tasks} tasks already"]
        if needs.checked_by_worker:
            lines.append(f"each worker checks itself: {'; '.join(needs.checked_by_worker)}")
        if self.status == RUNNING and self.open_slots:
            lines.append(f"the task is running with {self.open_slots} open slot(s): a worker that fits joins as a "
                         f"replacement from the next round")
        elif self.status != OPEN:
            lines.append(f"the task is {self.status}: it takes no new workers now")
        if not self.workers:
            lines.append("no worker is registered on this chain")
        for fit in self.workers:
            measured = (f"{fit.device}, {fit.memory_mb} MiB, {fit.threads} thread(s), {fit.samples_per_second} "
                        f"samples/s, balance {fit.balance} utrl, in {fit.tasks} task(s)")
            verdict = "fits" if not fit.shortfalls else "does not fit: " + "; ".join(fit.shortfalls)
            lines.append(f"  {fit.address} ({measured}): {verdict}")
        if self.workers and all(fit.shortfalls for fit in self.workers):
            lines.append("no registered worker meets every requirement")
        return lines


def requirements(spec_bytes: bytes, overview: TaskOverview, params: MarketParams) -> Requirements:
    """What the task's spec and terms ask of a worker; InvalidSpec when the spec cannot be read."""
    spec = parse_spec(spec_bytes)
    model = spec["model"]
    estimate = spec_footprint(spec).memory_mb
    determinism = spec.get("determinism", {})
    own = []
    if determinism.get("instruction_set"):
        own.append(f"training under instruction set {determinism['instruction_set']}")
    if model.get("base"):
        own.append(f"the base model {model['base']['package']}=={model['base']['version']} installed")
    own.append("the dataset fetched from the spec's URLs, and disk for it")
    return Requirements(estimate, determinism.get("threads", 1), overview.collateral, params.max_tasks_per_worker,
                        tuple(own))


def shortfalls(needs: Requirements, record: WorkerRecord, balance: int) -> tuple[str, ...]:
    """Each requirement `record` (a worker's measured hardware and its tasks) and its `balance` do not meet."""
    found = []
    if record.hardware.memory_mb and record.hardware.memory_mb < needs.memory_mb:
        found.append(f"memory {record.hardware.memory_mb} MiB < {needs.memory_mb} MiB")
    if record.hardware.threads < needs.threads:
        found.append(f"threads {record.hardware.threads} < {needs.threads}")
    if balance < needs.collateral:
        found.append(f"balance {balance} utrl < collateral {needs.collateral} utrl")
    if len(record.tasks) >= needs.max_tasks:
        found.append(f"already in {len(record.tasks)} task(s), the most a worker may be in")
    return tuple(found)


async def registered_workers(client: AsyncRpcClient) -> dict[str, WorkerRecord]:
    """Every currently registered worker's record by address (registration events, then each worker read)."""
    addresses: list[str] = []
    page = 1
    while True:
        found, total = await client.tx_search("worker.action='registered'", page=page, per_page=PAGE)
        for result in found:
            for event in result.events:
                address = event.get("address") if event.type == "worker" else None
                if address and address not in addresses:
                    addresses.append(address)
        if not found or page * PAGE >= total:
            break
        page += 1
    records = {}
    for address in addresses:
        try:
            view = await get_worker(client, address)
        except QueryFailed as error:
            if error.code == NotFound.code:
                continue
            raise
        if view.record is not None:
            records[address] = view.record
    return records


async def explain_no_join(client: AsyncRpcClient, task_id: int) -> NoJoinReport:
    """Task `task_id`'s requirements against every registered worker (QueryFailed for an unknown task)."""
    overview = await get_task_overview(client, task_id)
    spec_bytes = (await get_spec(client, task_id)).spec_bytes
    try:
        needs = requirements(spec_bytes, overview, await get_market_params(client))
    except (InvalidSpec, KeyError, TypeError, json.JSONDecodeError) as error:
        raise InvalidSpec(f"task {task_id}'s spec cannot be read: {error}") from None
    members = {member.worker for member in overview.members}
    fits = []
    for address, record in (await registered_workers(client)).items():
        if address in members:
            continue
        balance = (await fetch_account(client, address)).balance
        fits.append(WorkerFit(address, record.hardware.device, record.hardware.memory_mb, record.hardware.threads,
                              record.hardware.samples_per_second, balance, len(record.tasks),
                              shortfalls(needs, record, balance)))
    open_slots = overview.workers_wanted - overview.active_members if overview.status == RUNNING else 0
    return NoJoinReport(task_id, overview.status, overview.workers_joined, overview.workers_wanted, open_slots, needs,
                        tuple(fits))
