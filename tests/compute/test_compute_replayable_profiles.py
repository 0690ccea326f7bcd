"""A round's commitment names its residual (issue 19 item 1). Which instruction sets a worker commits:
`test_instruction_set_pin.py`."""

from __future__ import annotations

import pytest

from trolly.compute.worker.errors import WorkerError
from trolly.compute.worker.round_training import commitment
from trolly.compute.worker.progress import RoundProgress


def round_progress(residual_hash: str) -> RoundProgress:
    progress = RoundProgress(round=0)
    progress.steps = 10
    progress.checkpoints = ["11" * 32, "22" * 32, "33" * 32]
    progress.update_hash = "44" * 32
    progress.start_weights_hash = "55" * 32
    progress.residual_hash = residual_hash
    return progress


def test_a_commitment_names_the_recorded_residual():
    message = commitment(1, round_progress("66" * 32), 8, "profile")
    assert message.residual_hash == bytes.fromhex("66" * 32) and message.update_hash == bytes.fromhex("44" * 32)


def test_a_round_without_a_recorded_residual_cannot_be_committed():
    with pytest.raises(WorkerError, match="no recorded residual"):
        commitment(1, round_progress(""), 8, "profile")
