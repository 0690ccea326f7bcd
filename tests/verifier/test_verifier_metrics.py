"""The verifier's metrics (`verifier/metrics.py`), scraped over HTTP while it replays and votes on a sampled round
(the scenario of `test_verifier_service.py`: an honest worker, a bf16 cheat, an unreachable one); and a taken
metrics port, both ways."""

from __future__ import annotations

import asyncio

import pytest

from trolly.verifier.metrics import VerifierMetrics
from trolly.verifier.service import ServiceConfig, VerifierService
from trolly.wallet.metrics_endpoint import CONTINUE, REFUSE, MetricsPortInUse, start_metrics_endpoint
from trolly.wallet.rpc import AsyncRpcClient

from metrics_helpers import scrape
from verifier_scenario import VALIDATOR, WORKERS, market_node, open_and_commit


@pytest.fixture
def node():
    with market_node(WORKERS) as fake:
        yield fake


@pytest.mark.slow
def test_replayed_segments_and_votes_move_the_verifiers_counters_served_over_http(node, tmp_path):
    async def main():
        scenario = await open_and_commit(node.url, tmp_path)
        config = ServiceConfig(home=tmp_path / "verifier", node=node.url, unavailable_attempts=1, retry_delay=0.0,
                               deadline_margin=10**6, websocket=False, allow_private_blob_hosts=True,
                               metrics_address="127.0.0.1:0")
        service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
        endpoint = service.serve_metrics()
        try:
            before = scrape(endpoint.url)
            await service.run_once()
            return before, scrape(endpoint.url)
        finally:
            endpoint.close()
            await service.close()
            await scenario.close()

    before, after = asyncio.run(main())
    passed = ("trolly_verifier_segments_replayed_total", (("outcome", "pass"),))
    assert before.get(passed, 0) == 0
    assert after[passed] >= 3  # the honest worker's three segments
    assert after[("trolly_verifier_segments_replayed_total", (("outcome", "fail"),))] >= 1  # the bf16 segment
    assert after[("trolly_verifier_replay_seconds_count", ())] >= 4
    assert after[("trolly_verifier_votes_total", (("verdict", "pass"),))] >= 3
    assert after[("trolly_verifier_votes_total", (("verdict", "fail"),))] >= 1
    assert after[("trolly_verifier_missed_reveals_total", ())] == 0


def test_a_verifier_whose_metrics_port_is_taken_goes_on_without_metrics_when_asked(taken_address, caplog):
    """Bad input: the metrics address is held by another process; `continue` logs which and serves none."""
    assert start_metrics_endpoint(taken_address, VerifierMetrics().registry, "the verifier", CONTINUE) is None
    assert f"the verifier serves no metrics: {taken_address} is not available" in caplog.text


def test_a_verifier_told_to_refuse_a_taken_metrics_port_stops_before_its_first_pass(taken_address, tmp_path):
    """Bad input: the metrics address is held by another process; `refuse` ends `run` at once, naming it."""
    config = ServiceConfig(home=tmp_path / "verifier", node="http://127.0.0.1:9", websocket=False,
                           metrics_address=taken_address, metrics_port_in_use=REFUSE)

    async def main():
        service = VerifierService(config, VALIDATOR)
        try:
            await service.run(asyncio.Event())
        finally:
            await service.close()

    with pytest.raises(MetricsPortInUse, match=f"cannot serve metrics on {taken_address}"):
        asyncio.run(main())
