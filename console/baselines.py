"""The task page's baseline: what the requester could have had alone, shown beside the network's model.

For a task whose data this console holds (an upload it packed, a bundled dataset it built: the same copy the
chart evaluates each round on), a baseline is fitted here, on the task's own training split with the same
preprocessing (the packed features are the preprocessed ones), and scored on the same held-out split, by the
requester library's `compute.requester.baseline.fit_baseline` (a logistic regression for a table). The page
puts its score beside the model's held-out score, the chart's last point, so a requester sees at once whether
the network beat it (issue 34).

A baseline is measured once per task, off the event loop, and kept on disk (`<home>/console/baselines/`).
The fitting function is chosen where the app is built (`server.make_app`): the library's when this
installation has it (`library_fit`), none otherwise, and then the page shows no baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import pathlib
from typing import TYPE_CHECKING, Callable

from trolly.compute.errors import ComputeError
from trolly.wallet.files import write_atomically

from .config import ConsoleConfig

if TYPE_CHECKING:
    from trolly.compute.data import Dataset

log = logging.getLogger("trolly.console")

BaselineFit = Callable[["Dataset"], dict]
"""A dataset in, {"metric", "baseline", "baseline_name", "seconds"} out: the contract of `fit_baseline`."""
LIBRARY_MODULE = "trolly.compute.requester.baseline"
ANSWER_FIELDS = {"metric": str, "baseline": float, "baseline_name": str, "seconds": float}
UNMEASURED_KINDS = frozenset({"text"})
"""Data no baseline is fitted on: next-token prediction (the text transformer's corpus) has no model a requester
fits in seconds to compare with."""


def library_fit() -> BaselineFit | None:
    """The requester library's `fit_baseline` when this installation has it, else None. Found without importing
    it (it loads the compute library, which the console loads only when it first measures)."""
    if importlib.util.find_spec(LIBRARY_MODULE) is None:
        return None

    def fit(dataset: Dataset) -> dict:
        from trolly.compute.requester.baseline import fit_baseline

        return fit_baseline(dataset)
    return fit


class Baselines:
    """Each task's baseline, measured once from the console's own copy of its data."""

    def __init__(self, config: ConsoleConfig, fit: BaselineFit | None) -> None:
        self.config = config
        self.fit = fit
        self.measured: dict[int, dict] = {}

    def current(self, task_id: int) -> dict | None:
        """The baseline as measured (in memory, else on disk); None when it was not, or cannot be."""
        if task_id not in self.measured:
            with contextlib.suppress(OSError, ValueError):
                self.measured[task_id] = json.loads(self._path(task_id).read_text())
        return self.measured.get(task_id)

    async def measure(self, task_id: int, dataset: Dataset) -> None:
        """Fit and score the baseline on `dataset` (the task's data, from this console's own copy), once; a
        dataset the library cannot fit a baseline on is recorded with why, for the page."""
        if self.fit is None or dataset.shape.kind in UNMEASURED_KINDS or self.current(task_id) is not None:
            return
        try:
            answer = checked_answer(await asyncio.to_thread(self.fit, dataset))
        except (ComputeError, ValueError) as error:
            answer = {"problem": f"no baseline for this data: {error}"}
            log.info("task %d: %s", task_id, answer["problem"])
        self.measured[task_id] = answer
        write_atomically(self.config.directory("baselines") / f"task-{task_id}.json", json.dumps(answer).encode())

    def _path(self, task_id: int) -> pathlib.Path:
        return self.config.work / "baselines" / f"task-{task_id}.json"


def checked_answer(answer: dict) -> dict:
    """The fields the page shows, each of the type the contract names (ValueError when one is not)."""
    checked = {}
    for name, kind in ANSWER_FIELDS.items():
        value = answer.get(name) if isinstance(answer, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
            raise ValueError(f"the baseline's answer has no {kind.__name__} {name!r}")
        checked[name] = round(float(value), 6) if kind is float else value
    return checked
