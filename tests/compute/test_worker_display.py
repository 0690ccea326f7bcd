"""What an operator sees (`display.py`) and the block clock the step planning uses (`service.BlockClock`)."""

from __future__ import annotations

import logging
import time

from trolly.compute.worker.display import RoundDisplay, configure_logging
from trolly.compute.worker.throughput import BlockClock


def test_plain_output_logs_each_segment(caplog):
    display = RoundDisplay(use_rich=False)
    with caplog.at_level(logging.INFO, logger="trolly.worker"):
        display.begin(3, 1, 0, 20)
        display.advance(10, 20)
        display.advance(20, 20)
        display.end()
    assert [r.getMessage() for r in caplog.records] == ["task 3 round 1: step 10 of 20", "task 3 round 1: step 20 of 20"]


def test_rich_progress_starts_advances_and_stops(capsys):
    display = RoundDisplay(use_rich=True)
    display.begin(3, 0, 5, 20)
    display.advance(10, 20)
    assert display._progress is not None and display._progress.tasks[0].completed == 10
    display.end()
    assert display._progress is None


def test_configure_logging_picks_the_handler():
    assert configure_logging("warning", rich_output=False) is False
    assert logging.getLogger().level == logging.WARNING
    assert configure_logging("info", rich_output=True) is True
    configure_logging("info", rich_output=False)


def test_block_clock_estimates_seconds_per_block():
    clock = BlockClock()
    assert clock.seconds_per_block() is None
    clock.observe(10)
    time.sleep(0.05)
    clock.observe(10)  # same height: no new information
    assert clock.seconds_per_block() is None
    clock.observe(12)
    per_block = clock.seconds_per_block()
    assert per_block is not None and 0.02 <= per_block < 1.0
