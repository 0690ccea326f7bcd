"""A worker checks a task's memory estimate against its declared memory before joining."""

from __future__ import annotations

import json

import pytest

from market_helpers import spec_bytes
from trolly.compute.worker.errors import TaskUnfit
from trolly.compute.worker.fit import check_memory


def big_spec() -> bytes:
    spec = json.loads(spec_bytes(batch_size=4096))
    spec["model"] = {"arch": "mlp", "config": {"hidden": [8192, 8192]}}
    return json.dumps(spec).encode()


def test_a_task_that_fits_the_declared_memory_gives_its_estimate():
    assert 256 < check_memory(spec_bytes(), 1024) <= 1024


def test_a_task_beyond_the_declared_memory_is_unfit():
    with pytest.raises(TaskUnfit, match="MiB"):
        check_memory(big_spec(), 1024)


def test_a_worker_that_declared_no_memory_is_not_held_to_one():
    assert check_memory(big_spec(), 0) > 1024


def test_a_spec_without_a_footprint_is_unfit():
    with pytest.raises(TaskUnfit, match="cannot be computed"):
        check_memory(b'{"model": 1}', 1024)
