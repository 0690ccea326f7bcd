"""The app's own metrics (`abci_app/metrics.py`): served over HTTP and moved by a delivered transaction, counted
from the chain's events (rounds, verdicts, slashes) with tasks by status kept equal to a full recount; and a
metrics port already in use, both ways the config can ask (`trolly-node start`, a real process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from abci_helpers import CHAIN_ID, FakeStore, ServerProcess, genesis_bytes, key_for, send_tx
from google.protobuf.timestamp_pb2 import Timestamp
from market_helpers import MARKET_PARAMS, Market, settle_round, spec_bytes
from prometheus_client.parser import text_string_to_metric_families

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.metrics import AppMetrics, tally_events
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.chain.block import Event
from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_FAIL
from trolly.wallet.metrics_endpoint import start_metrics_endpoint

ALICE, BOB = key_for(1), key_for(2)
NODE = os.path.join(os.path.dirname(sys.executable), "trolly-node")


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample an endpoint serves: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_delivered_transaction_moves_the_transaction_counter_served_over_http():
    store = FakeStore()
    app = TrollyApplication(store)
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                         app_state_bytes=genesis_bytes({ALICE: 1_000_000, BOB: 1_000_000})))
    endpoint = start_metrics_endpoint("127.0.0.1:0", app.metrics.registry, "the app under test")
    try:
        sent = ("trolly_transactions_total", (("code", "0"), ("codespace", ""), ("message", "MsgSend")))
        assert scrape(endpoint.url).get(sent, 0) == 0
        app.finalize_block(abci.RequestFinalizeBlock(height=1, txs=[send_tx(ALICE, BOB.address, 5, 0), b"junk"],
                                                     time=Timestamp(seconds=1_700_000_000)))
        assert scrape(endpoint.url).get(sent, 0) == 0  # executed, not yet committed: not counted
        app.commit(abci.RequestCommit())
        samples = scrape(endpoint.url)
        assert samples[sent] == 1
        failed = [key for key, value in samples.items() if key[0] == "trolly_transactions_total"
                  and ("message", "undecodable") in key[1] and value == 1]
        assert failed and ("code", "0") not in failed[0][1]  # the junk: counted under its failure code
        assert samples[("trolly_block_execution_seconds_count", ())] == 1
        assert samples[("trolly_app_height", ())] == 1
    finally:
        endpoint.close()


def observed(chain, metrics: AppMetrics):
    """Feed every block the chain harness commits into `metrics`, as FinalizeBlock and Commit do in the app."""
    commit_block = chain.block

    def block(*txs, **options):
        started = time.perf_counter()
        output = commit_block(*txs, **options)
        metrics.block_finalized(list(txs), output.tx_results, output.events, started)
        metrics.block_committed(chain.height, chain.state)
        return output

    chain.block = block
    return chain


def value(metrics: AppMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0


def test_rounds_verdicts_slashes_and_tasks_by_status_follow_the_chains_events(make_chain):
    metrics = AppMetrics()
    chain = observed(make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS}), metrics)
    metrics.recount_tasks(chain.state)
    market = Market(chain)
    task_id = market.open_task(workers=2, rounds=2, spec=spec_bytes(rounds=2), round_blocks=20)
    assert value(metrics, "trolly_tasks", status="running") == 1
    assert value(metrics, "trolly_tasks", status="open") == 0
    market.submit()  # a second task, left open
    assert value(metrics, "trolly_tasks", status="open") == 1
    market.commit(task_id, 0, market.workers[:2])
    cheater = market.workers[1]
    settle_round(market, task_id, {encode_address(cheater.address): VERDICT_FAIL})
    assert value(metrics, "trolly_rounds_settled_total") == 1
    assert value(metrics, "trolly_verdicts_total", outcome="pass") >= 1
    assert value(metrics, "trolly_verdicts_total", outcome="fail") >= 1
    assert value(metrics, "trolly_slashes_total", reason="verification_failed") == 1
    assert value(metrics, "trolly_transactions_total", message="MsgSubmitVerdict", codespace="", code="0") >= 2
    recounted = AppMetrics()
    recounted.recount_tasks(chain.state)
    for status in ("open", "running", "completed", "cancelled", "expired", "abandoned"):
        assert value(metrics, "trolly_tasks", status=status) == value(recounted, "trolly_tasks", status=status)


def test_validator_slashes_are_counted_by_reason_and_events_of_other_modules_are_ignored():
    tally = tally_events([
        Event.of("slash", operator="o", kind=1, jailed="true"),  # double sign evidence
        Event.of("slash", operator="o", reason="downtime"),
        Event.of("task", id=3, action="lazy_verifier", penalty=5),
        Event.of("task", id=3, action="verdict_late", round=0),
        Event.of("task", id=4, action="verdict", verdict="made-up"),
        Event.of("transfer", sender="a", recipient="b", amount=1),
    ])
    assert tally.slashes == {"duplicate_vote": 1, "downtime": 1, "lazy_verifier": 1}
    assert tally.verdicts == {"late": 1, "other": 1}
    assert tally.tasks_named == {3, 4} and tally.rounds_settled == 0


# -- a metrics port already in use ---------------------------------------------------------------------------


@pytest.fixture
def taken_port():
    """A loopback port another process's socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def node_home(tmp_path):
    home = tmp_path / "node"
    subprocess.run([NODE, "init", "--home", str(home), "--chain-id", CHAIN_ID, "--dev"], check=True,
                   capture_output=True, text=True)
    return home


@pytest.mark.slow
def test_a_node_whose_metrics_port_is_taken_says_which_and_goes_on_without_metrics(node_home, taken_port):
    """Bad input: the metrics address is held by another process and the config says `continue`."""
    address = f"unix://{node_home}/data/app.sock"
    server = ServerProcess("", address, argv=[NODE, "--log-level", "warning", "start", "--home", str(node_home),
                                              "--abci", address, "--metrics-laddr", f"127.0.0.1:{taken_port}"])
    try:
        assert server.process.poll() is None  # listening for its engine all the same
    finally:
        code = server.stop()
    assert code == 0
    assert f"127.0.0.1:{taken_port} is not available" in server.stderr()


@pytest.mark.slow
def test_a_node_configured_to_refuse_a_taken_metrics_port_stops_and_names_it(node_home, taken_port):
    """Bad input: the metrics address is held by another process and config.toml says `refuse`."""
    config = node_home / "config" / "config.toml"
    config.write_text(config.read_text()
                      .replace('metrics_listen_addr = "127.0.0.1:26661"', f'metrics_listen_addr = "127.0.0.1:{taken_port}"')
                      .replace('metrics_port_in_use = "continue"', 'metrics_port_in_use = "refuse"'))
    done = subprocess.run([NODE, "start", "--home", str(node_home)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"cannot serve metrics on 127.0.0.1:{taken_port}" in done.stderr
    assert not (node_home / "data" / "app.sock").exists()  # it never listened for its engine
