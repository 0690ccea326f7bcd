"""The task page's chart: held-out loss and accuracy of the global weights after each verified round.

The chain holds hashes, not losses. A background job per task does what a requester can do alone (as the
localnet demo's observer does): it derives W_0 from the spec and each W_{r+1} from W_r and round r's updates
that passed verification (`compute.weights_follower`, fetched by hash from the members), evaluates each on
the task's held-out split, and says whether it hashes to what the chain recorded (the next round's agreed
start, or the final weights). Results are cached on disk per task (`<home>/console/charts/`), so a point is
computed once; the page reads the job's progress while it runs.

Reading a chart (`current`) starts nothing; `chart` starts the job, and only the console's own page (a POST,
guarded) and the console's follow loop (for the tasks it submitted) call it.

The held-out split comes from the data the console itself serves (an upload it packed, a bundled dataset it
built) when it has it: for a private task it submitted, the task's own re-encrypted copy of the pack and that
copy's key, both kept in the pack's folder (`compute.data.packing.for_one_task`, found again by `task_copy`),
so the key never leaves this machine. Else the split comes from the spec's and the members' URLs by the one
dataset fetcher (`compute/data/fetch.py`), public data only (a private task whose pack is elsewhere is refused
before anything is fetched, saying where it can be charted): then only the manifest (at most
`MAX_MANIFEST_BYTES`) and the held-out shards are fetched, refused beyond what the spec declared and beyond
`MAX_HELD_OUT_BYTES`, fetched or decoded.

With its own copy of the data the job also measures the task's baseline once (`baselines.py`), which the
chart's answer carries beside the points.

The compute library that derives and evaluates the weights loads torch, so it is imported in the functions that
run a job: a console loads torch when it first charts a task, not when it starts (it runs pinned, as every
entry point that trains does: `console/entry.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from typing import TYPE_CHECKING

from trolly.chain.market.records import COMPLETED, OPEN
from trolly.compute.blobs import BlobError
from trolly.compute.errors import ComputeError
from trolly.wallet.errors import WalletError
from trolly.wallet.files import write_atomically
from trolly.wallet.market_queries import get_spec, get_task
from trolly.wallet.market_views import TaskView
from trolly.wallet.rpc import AsyncRpcClient

from .baselines import Baselines
from .config import ConsoleConfig

if TYPE_CHECKING:
    from trolly.compute.data import Dataset
    from trolly.compute.spec import TaskSpec

log = logging.getLogger("trolly.console")

MAX_MANIFEST_BYTES = 8 << 20
"""The largest manifest a chart job fetches: room for the most shards a market allows, a few hundred bytes each."""
MAX_HELD_OUT_BYTES = 256 << 20
"""The most held-out data a chart job fetches, and holds decoded, for a task whose data the console lacks."""


@dataclasses.dataclass
class Chart:
    """One task's points so far, and what its job is doing."""

    task_id: int
    points: list[dict] = dataclasses.field(default_factory=list)
    state: str = "idle"
    """idle (nothing to do yet), running, done (every round charted) or stopped (a round cannot be derived)."""
    progress: str = ""
    problem: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class RoundCharts:
    """A chart per task, each computed by one background job at a time; `chart(task_id)` starts a job when
    rounds have settled since the last one."""

    def __init__(self, client: AsyncRpcClient, config: ConsoleConfig, local_data, baselines: Baselines) -> None:
        """`local_data(manifest_hash)`: the console's own copy of a dataset (a `Dataset`), or None; `baselines`:
        where a task's baseline is measured from that copy and kept."""
        self.client = client
        self.config = config
        self.local_data = local_data
        self.baselines = baselines
        self.charts: dict[int, Chart] = {}
        self._jobs: dict[int, asyncio.Task] = {}

    def current(self, task_id: int) -> Chart:
        """The chart as far as it is computed (in memory, else cached on disk); starts and writes nothing."""
        return self.charts.get(task_id) or self._load(task_id)

    def answer(self, chart: Chart) -> dict:
        """What the page reads: the chart, and the task's baseline when one was measured."""
        return {**chart.to_json(), "baseline": self.baselines.current(chart.task_id)}

    def chart(self, task_id: int, view: TaskView) -> Chart:
        """The chart, its job started first when rounds settled since it last ran."""
        chart = self.current(task_id)
        self.charts[task_id] = chart
        if record_chain_hashes(chart.points, view):
            self._save(chart)
        running = task_id in self._jobs and not self._jobs[task_id].done()
        if not running and chart.state != "stopped" and len(chart.points) < settled_rounds(view) + 1:
            chart.state, chart.problem = "running", ""
            self._jobs[task_id] = asyncio.create_task(self._run(chart), name=f"chart-{task_id}")
        return chart

    async def _run(self, chart: Chart) -> None:
        from trolly.compute.spec import parse_spec
        from trolly.compute.weights_follower import DirectoryCache, WeightsFollower

        try:
            # the node's word (tests/project/test_display_reads_proven.py says why)
            view = await get_task(self.client, chart.task_id)
            spec = parse_spec((await get_spec(self.client, chart.task_id)).spec_bytes)
            chart.progress = "loading the held-out split"
            dataset, own_copy = await self._dataset(spec, view)
            if own_copy:
                chart.progress = "fitting the baseline on the training split"
                await self.baselines.measure(chart.task_id, dataset)
            follower = WeightsFollower(spec, dataset.shape, self.config.addresses,
                                       cache=DirectoryCache(self.config.directory("charts") / f"task-{chart.task_id}"))
            for round_index in range(len(chart.points), settled_rounds(view) + 1):
                chart.progress = f"deriving and evaluating W_{round_index} (of {view.rounds})"
                state = await follower.state(round_index, view)
                loss, accuracy = await asyncio.to_thread(_evaluate, spec, dataset, state.weights)
                chart.points.append({"round": round_index, "loss": round(loss, 6), "accuracy": None if accuracy is None else round(accuracy, 6),
                                     "weights_hash": state.weights_hash().hex(), "chain_hash": "",
                                     "matches_chain": None})
                record_chain_hashes(chart.points, view)
                self._save(chart)
            chart.state = "done" if len(chart.points) == view.rounds + 1 else "idle"
            chart.progress = f"{len(chart.points) - 1} of {view.rounds} rounds charted"
        except (ComputeError, WalletError) as error:  # updates no longer served, private data, the node down
            chart.state, chart.problem = "stopped", str(error)
            log.info("task %d: chart stopped: %s", chart.task_id, error)

    async def _dataset(self, spec: TaskSpec, view: TaskView) -> tuple[Dataset, bool]:
        """The task's dataset, and whether it is this console's own copy (else only its held-out split, fetched)."""
        from trolly.compute.data.fetch import DatasetFetcher, dataset_urls
        from trolly.compute.requester.results import spec_shape

        local = await asyncio.to_thread(self.local_data, spec.dataset.manifest_hash)
        if local is not None:
            return local, True
        if view.private_data:
            raise ComputeError("the task's data is private and this console does not hold its pack: its chart is "
                               "drawn by the console that submitted it, or by `trolly-wallet task eval TASK --data "
                               "DIR` on the requester's pack")
        try:
            fetcher = DatasetFetcher.for_task(spec, dataset_urls(spec, view), self.config.addresses,
                                              max_manifest_bytes=MAX_MANIFEST_BYTES)
            dataset = await fetcher.split("test", MAX_HELD_OUT_BYTES)
        except BlobError as error:
            raise ComputeError(f"the task's dataset could not be fetched for its held-out split: {error}") from None
        if dataset.shape != spec_shape(spec):
            raise ComputeError("the task's dataset does not have the shape its spec declares")
        return dataset, False

    def _load(self, task_id: int) -> Chart:
        path = self.config.work / "charts" / f"task-{task_id}.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return Chart(task_id, list(json.loads(path.read_text())["points"]))
        return Chart(task_id)

    def _save(self, chart: Chart) -> None:
        path = self.config.directory("charts") / f"task-{chart.task_id}.json"
        write_atomically(path, json.dumps({"task_id": chart.task_id, "points": chart.points}).encode())

    async def stop(self) -> None:
        for job in self._jobs.values():
            job.cancel()
        for job in self._jobs.values():
            with contextlib.suppress(asyncio.CancelledError):
                await job
        self._jobs.clear()


def settled_rounds(view: TaskView) -> int:
    """How many rounds have settled (a round is settled once the task has moved past it, or it completed)."""
    if view.status == COMPLETED:
        return view.rounds
    return 0 if view.status == OPEN else min(view.round, view.rounds)


def record_chain_hashes(points: list[dict], view: TaskView) -> bool:
    """Fill in, for the points whose W_r the chain has recorded since (round r's agreed start, or the final
    weights for r = rounds), that hash and whether the derived W_r matches it; True when one was filled in."""
    from trolly.compute.weights_follower import agreed_start_hash

    changed = False
    for point in points:
        if point["chain_hash"]:
            continue
        round_index = point["round"]
        on_chain = view.final_weights_hash if round_index == view.rounds else agreed_start_hash(view, round_index)
        if on_chain:
            point.update(chain_hash=on_chain, matches_chain=point["weights_hash"] == on_chain)
            changed = True
    return changed


def _evaluate(spec: TaskSpec, dataset: Dataset, weights) -> tuple[float, float]:
    from trolly.compute.models import build_model
    from trolly.compute.training import evaluate

    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    model.load_state_dict(dict(weights))
    return evaluate(model, dataset)
