"""Every Prometheus endpoint of a running localnet, with real processes: `trolly-localnet status` names each one
(the consensus engine's and the app's per node, each verifier's and worker's), each answers over HTTP with the
metrics of its kind, and the consensus engine's `cometbft_consensus_height` moves as blocks are made: on the solo
engine (which keeps CometBFT's names) and on a real CometBFT validator."""

from __future__ import annotations

import contextlib
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localnet_helpers import cometbft_missing, free_base_port, localnet, wait_until

pytestmark = pytest.mark.slow

PREFIXES = {"engine": "cometbft_consensus_height", "cometbft": "cometbft_consensus_height",
            "app": "trolly_transactions", "verifier": "trolly_verifier_votes", "worker": "trolly_worker_rounds_trained"}
"""A metric each kind of endpoint serves, by the service name's kind."""


def samples(url: str) -> dict[str, float]:
    """The samples an endpoint serves by name, summed over their labels (CometBFT's carry `chain_id`), and every
    family's name (value 0) even before it has a sample."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, 0.0)
        for sample in family.samples:
            found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


@pytest.mark.parametrize("engine, workers", [
    ("solo", 1),
    pytest.param("cometbft", 0, marks=pytest.mark.skipif(bool(cometbft_missing()), reason="needs CometBFT v0.38")),
])
def test_status_names_every_metrics_endpoint_and_each_answers(tmp_path, engine, workers):
    home = tmp_path / "net"
    base = free_base_port(validators=1, workers=workers)
    with contextlib.ExitStack() as stack:
        localnet("up", "-d", "--engine", engine, "--validators", "1", "--workers", str(workers), "--slow-workers", "0",
                 "--home", str(home), "--base-port", str(base), timeout=300)
        stack.callback(localnet, "down", "--home", str(home), check=False)
        status = json.loads(localnet("status", "--home", str(home), "-o", "json").stdout)
        endpoints = status["metrics"]
        kinds = {"cometbft": "cometbft", "solo": "engine"}
        expected = {f"{kinds[engine]}-0", "app-0", "verifier-0"} | {f"worker-{i}" for i in range(workers)}
        assert set(endpoints) == expected
        assert len(set(endpoints.values())) == len(endpoints)  # a port of its own each
        text = localnet("status", "--home", str(home)).stdout
        assert all(url in text for url in endpoints.values())  # the table names them too
        for name, url in endpoints.items():
            metric = PREFIXES[name.rpartition("-")[0]]
            wait_until(lambda: metric in samples(url), timeout=180, what=f"{name}'s {metric} at {url}")
        consensus = endpoints[f"{kinds[engine]}-0"]
        first = samples(consensus)["cometbft_consensus_height"]
        wait_until(lambda: samples(consensus)["cometbft_consensus_height"] > first, timeout=60,
                   what="cometbft_consensus_height to move")
        assert samples(endpoints["app-0"])["trolly_app_height"] >= 1
