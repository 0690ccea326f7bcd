"""What an operator sees: log lines that read as a story, and a live progress bar on a terminal.

Logs go to stderr through `logging` (one line per event: registered, joined, round started with its
declared steps, checkpoints, committed, verdicts, paid, task ended), so they read the same in a terminal and
in a localnet's log file. When stderr is a terminal, a rich progress bar shows the inner steps of the round
being trained; otherwise the same progress is logged once per segment.
"""

from __future__ import annotations

import logging
import sys

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

log = logging.getLogger("trolly.worker")


def configure_logging(level: str = "info", rich_output: bool | None = None) -> bool:
    """Set up the worker's logging; returns whether rich (terminal) output is used."""
    use_rich = sys.stderr.isatty() if rich_output is None else rich_output
    if use_rich:
        handler: logging.Handler = RichHandler(console=Console(stderr=True), show_path=False, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s", datefmt="%H:%M:%S"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return use_rich


class RoundDisplay:
    """Progress of the round being trained: a rich bar on a terminal, log lines otherwise."""

    def __init__(self, use_rich: bool) -> None:
        self.use_rich = use_rich
        self._progress: Progress | None = None
        self._bar = None

    def begin(self, task_id: int, round_index: int, done: int, steps: int) -> None:
        if self.use_rich:
            self._progress = Progress(TextColumn("task {task.fields[task_id]} round {task.fields[round]}"), BarColumn(),
                                      MofNCompleteColumn(), TextColumn("steps"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
            self._progress.start()
            self._bar = self._progress.add_task("train", total=steps, completed=done, task_id=task_id, round=round_index)
        self._label = f"task {task_id} round {round_index}"

    def advance(self, step: int, steps: int) -> None:
        """Called from the training thread after each segment."""
        if self._progress is not None:
            self._progress.update(self._bar, completed=step)
        else:
            log.info("%s: step %d of %d", self._label, step, steps)

    def end(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
