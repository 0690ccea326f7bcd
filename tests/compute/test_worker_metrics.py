"""The worker's metrics (`compute/worker/metrics.py`), scraped over HTTP while the worker loop trains a task on the
in-process chain (as `test_worker_service.py` drives it): rounds trained, their seconds and pace, the bytes it
published and what it was paid move with the work; and a taken metrics port, both ways."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from market_helpers import MARKET_PARAMS
from metrics_helpers import scrape_unlabelled as scrape
from worker_helpers import ROUNDS, joined_task, new_service

from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_PASS
from trolly.compute.data import build_dataset
from trolly.compute.worker.errors import WorkerError
from trolly.compute.worker.metrics import WorkerMetrics
from trolly.compute.worker.progress import WorkerState
from trolly.wallet.market_views import TaskView
from trolly.wallet.metrics_endpoint import CONTINUE, REFUSE, start_metrics_endpoint


def test_a_trained_round_moves_the_workers_counters_served_over_http(make_chain, tmp_path):
    chain, market, task_id, spec = joined_task(make_chain, build_dataset("digits"))
    home = tmp_path / "worker"
    home.mkdir()
    WorkerState.load(home).add_task(task_id, hashlib.sha256(spec).hexdigest(), 0)
    service = new_service(home, chain, market.workers[0])
    endpoint = start_metrics_endpoint("127.0.0.1:0", service.metrics.registry, "the worker under test")

    async def drive():
        context = await service.prepare(service.state.task(task_id))
        trained_before = scrape(endpoint.url)["trolly_worker_rounds_trained_total"]
        published = []
        for _ in range(60):
            if not await service.step(context):
                return trained_before, published
            published.append(scrape(endpoint.url)["trolly_worker_published_bytes_total"])
            phase = market.task(task_id)["phase"]
            if phase == "sampling":
                chain.advance(1)
            elif phase == "verify":
                market.vote(chain.operators, task_id, VERDICT_PASS)
        raise AssertionError("the task did not end")

    try:
        trained_before, published = asyncio.run(drive())
        samples = scrape(endpoint.url)
    finally:
        endpoint.close()
    assert trained_before == 0
    assert samples["trolly_worker_rounds_trained_total"] == ROUNDS
    assert samples["trolly_worker_round_seconds_count"] == ROUNDS
    assert samples["trolly_worker_samples_per_second"] > 0
    assert 0 < published[0] < samples["trolly_worker_published_bytes_total"]  # the first round's, then more
    member = TaskView.from_answer(market.task(task_id)).member(encode_address(market.workers[0].address))
    assert member.paid > 0 and samples["trolly_worker_earnings_utrl_total"] == member.paid


def test_a_worker_whose_metrics_port_is_taken_goes_on_without_metrics_when_asked(taken_address, caplog):
    """Bad input: the metrics address is held by another process; `continue` logs which and serves none."""
    assert start_metrics_endpoint(taken_address, WorkerMetrics().registry, "the worker", CONTINUE) is None
    assert f"the worker serves no metrics: {taken_address} is not available" in caplog.text


def test_a_worker_told_to_refuse_a_taken_metrics_port_does_not_start(make_chain, tmp_path, taken_address):
    """Bad input: the metrics address is held by another process; `refuse` stops the worker before it registers."""
    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    home = tmp_path / "worker"
    home.mkdir()
    service = new_service(home, chain, chain.accounts[1])
    service.options = type(service.options)(metrics_address=taken_address, metrics_port_in_use=REFUSE)
    with pytest.raises(WorkerError, match=f"cannot serve metrics on {taken_address}"):
        asyncio.run(service.start())
    assert chain.height == 0  # nothing registered, nothing staked

