"""The localnet end to end, as a user runs it: real processes (nodes, verifiers, workers), a real training task,
and what must hold around it (issue 7): the demo settles on 4 CometBFT validators and its model beats the floor,
and its LoRA task (`--task lora-text`) settles and its fetched model beats its own floor;
on the one-validator solo engine, a worker killed mid-task is paid only for its verified rounds while the others
finish, a node killed and restarted mid-task resumes its chain with nothing lost, a cheating worker is slashed,
`down` leaves no process behind, and `reset` then `up` starts a new chain. Each test has its own home and its
own block of ports (xdist-safe).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.localnet.demo_tasks import ACCURACY_FLOOR, LORA_TEXT_ACCURACY_FLOOR
from trolly.localnet.home_layout import ACCOUNT_BALANCE, WORKER_INDEX_BASE, Layout, LocalnetConfig
from trolly.localnet.network import Localnet
from trolly.wallet.rpc import RpcClient

from localnet_helpers import (
    cometbft_missing,
    LOCALNET,
    free_base_port,
    listening_sockets,
    localnet,
    process_family,
    processes_mentioning,
    query,
    recorded_pids,
    survivors,
    wait_until,
)
from whole_task import whole_task

pytestmark = pytest.mark.slow

ROUNDS = 3
TASK_TIMEOUT = 300  # seconds the demo follows its task; a quiet machine needs about 40
DEMO_ARGS = ("--rounds", str(ROUNDS), "--timeout", str(TASK_TIMEOUT))
SOLO = ("--engine", "solo")
LORA_DEMO_TIMEOUT = 1200  # seconds for the whole LoRA demo (its task timeout is 900); 2 loaded cores took 360
SERVICES = {"app-0", "engine-0", "verifier-0", "worker-0", "worker-1", "worker-2", "console"}
COMETBFT_SERVICES = {f"{kind}-{i}" for kind in ("app", "cometbft", "verifier") for i in range(4)} | {
    "worker-0", "worker-1", "worker-2", "console"}


needs_cometbft = pytest.mark.skipif(bool(cometbft_missing()), reason=f"needs CometBFT v0.38: {cometbft_missing()}")


def worker_address(index: int) -> str:
    return encode_address(dev_key(WORKER_INDEX_BASE + index).address)


def last_json_line(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def member_of(view: dict, index: int) -> dict:
    (member,) = [m for m in view["members"] if m["worker"] == worker_address(index)]
    return member


def commitments_of(view: dict, index: int) -> list[dict]:
    return [dict(c, round=r["round"]) for r in view["round_details"] if not r["final_report"]
            for c in r["commitments"] if c["worker"] == worker_address(index)]


def tx_fees_paid(rpc: str, address: str) -> int:
    """The fees of every transaction `address` signed, from their `tx` events (all pages of tx_search)."""
    paid, page = 0, 1
    with RpcClient(rpc, timeout=10.0) as client:
        while True:
            results, count = client.tx_search(f"tx.signer='{address}'", page=page, per_page=100)
            paid += sum(int(event.get("fee", "0")) for result in results for event in result.events
                        if event.type == "tx" and event.get("signer") == address)
            if not results or page * 100 >= count:
                return paid
            page += 1


def assert_paid_exactly_for_passed_rounds(rpc: str, view: dict, index: int) -> dict:
    """The member's pay is the sum over its passed rounds, and its balance on chain is what the genesis gave
    it, less its worker stake, plus that pay, less its penalties and the fees of every transaction it signed."""
    member = member_of(view, index)
    commitments = commitments_of(view, index)
    passed = [c for c in commitments if c["outcome"] == "passed"]
    assert member["paid"] == sum(c["paid"] for c in passed)
    assert member["rounds_passed"] == len(passed)
    assert all(c["paid"] == 0 for c in commitments if c["outcome"] != "passed")
    worker = query(rpc, f"/market/worker/{worker_address(index)}")
    balance = query(rpc, f"/account/{worker_address(index)}")["balance"]
    fees = tx_fees_paid(rpc, worker_address(index))
    assert fees > 0  # the localnet charges the default fees
    assert balance == (ACCOUNT_BALANCE - worker["stake"] + member["paid"] - member["penalized"] - member["slashed"]
                       - fees)
    assert worker["earned"] == member["paid"] and worker["slashed"] == member["slashed"]
    return member


# ------------------------------------------------------------------------------------------------ demo


@needs_cometbft
def test_demo_on_four_cometbft_validators_completes_settles_and_beats_the_accuracy_floor(tmp_path):
    home = tmp_path / "net"
    done = localnet("demo", "--home", str(home), "--base-port", str(free_base_port(validators=4)), *DEMO_ARGS,
                    timeout=TASK_TIMEOUT + 300)
    summary = last_json_line(done.stdout)
    assert {"task_id", "rounds", "final_accuracy", "paid_per_worker", "seconds", "engine", "validators",
            "votes"} <= set(summary)
    assert summary["engine"] == "cometbft"
    validators = summary["validators"]
    assert [validators[f"validator-{i}"]["power_percent"] for i in range(4)] == [40.0, 30.0, 20.0, 10.0]
    # Every validator is paid fees (the task's validator fee goes by power to all of them).
    assert all(v["fee_share"] > 0 for v in validators.values())
    # Votes per round, by validator: the committees come from several validators, and honest work passes.
    assert [r["round"] for r in summary["votes"]] == list(range(ROUNDS))
    voters = {name for r in summary["votes"] for name in r["votes"]}
    assert len(voters) >= 2 and voters <= set(validators)
    assert all(set(tally) == {"pass"} for r in summary["votes"] for tally in r["votes"].values())
    assert summary["status"] == "completed" and summary["rounds"] == ROUNDS
    assert summary["final_accuracy"] >= ACCURACY_FLOOR
    paid = summary["paid_per_worker"]
    assert set(paid) == {"worker-0", "worker-1", "worker-2"}
    # worker-2 declares itself slower: fewer samples per round, so less pay (samples-weighted blending).
    assert 0 < paid["worker-2"] < min(paid["worker-0"], paid["worker-1"])
    assert summary["seconds"] > 0
    # The demo checked its settlement table against the balances on chain, and the weights it recomputed
    # round by round (held-out loss shown live) against the chain's hashes.
    report = " ".join(done.stderr.split())
    assert "MISMATCH" not in report and "each worker's balance change = pay - penalties" in report
    assert f"W_1..W_{ROUNDS} recomputed here = the chain's agreed and final weights hashes" in report
    losses = [float(x) for x in re.findall(r"W_\d[^:]*: held-out loss ([0-9.]+)", report)]
    assert len(losses) == ROUNDS + 1 and losses[-1] < losses[0]
    # It stopped everything it started, children included.
    pids = {int(pid) for pid in re.findall(r"\(pid (\d+)\)", done.stderr)}
    assert len(pids) == len(COMETBFT_SERVICES)
    assert process_family(pids) == {} and processes_mentioning(str(home)) == []


def test_demo_of_the_lora_task_fine_tunes_verifies_fetches_and_beats_its_floor(tmp_path):
    """`demo --task lora-text`: all-MiniLM-L6-v2 fine-tuned with LoRA on pydocs, packed from a JSONL of texts and
    private and re-encrypted for the task under a key of its own, by 3 workers, who get that key once the task runs
    (the validator once drawn to check it), verified, paid, the model
    fetched by its hash as `task fetch` writes it (the adapters, the merged model) and evaluated; what a worker
    holds and serves of the data is ciphertext."""
    from safetensors.numpy import load_file

    from trolly.compute.blobs import BlobStore
    from trolly.compute.data.encryption import DataKeyError
    from trolly.compute.data.manifest import load_dataset

    home = tmp_path / "net"
    done = localnet("demo", "--task", "lora-text", *SOLO, "--home", str(home), "--base-port", str(free_base_port()),
                    timeout=LORA_DEMO_TIMEOUT)
    summary = last_json_line(done.stdout)
    assert summary["task"] == "lora-text" and summary["status"] == "completed"
    assert summary["final_accuracy"] >= summary["accuracy_floor"] == LORA_TEXT_ACCURACY_FLOOR
    assert [r["round"] for r in summary["votes"]] == list(range(summary["rounds"]))
    assert all(set(tally) == {"pass"} for r in summary["votes"] for tally in r["votes"].values())
    assert set(summary["paid_per_worker"]) == {"worker-0", "worker-1", "worker-2"}
    assert all(paid > 0 for paid in summary["paid_per_worker"].values())
    report = " ".join(done.stderr.split())
    assert "MISMATCH" not in report
    assert f"W_1..W_{summary['rounds']} recomputed here = the chain's agreed and final weights hashes" in report
    # What the requester takes home: the verified adapters and head, and the whole model with them merged in.
    result = home / "results" / f"task-{summary['task_id']}"
    adapter, merged = load_file(result / "adapter.safetensors"), load_file(result / "model.safetensors")
    assert set(adapter) == {name for name in adapter if name.startswith("adapters.")} | {"head.weight", "head.bias"}
    assert sum(t.size for t in merged.values()) > 20_000_000 > sum(t.size for t in adapter.values())
    assert (adapter["head.weight"] == merged["head.weight"]).all()
    spec = json.loads((result / "spec.json").read_text())
    assert spec["model"]["arch"] == "lora-text" and spec["dataset"]["name"] == "packed"
    assert spec["dataset"]["cipher"] == "xsalsa20poly1305" and spec["dataset"]["context"] == 64
    sealed = {name for line in report.split("data key sealed to ")[1:] for name in
              re.findall(r"(worker-\d|validator-\d)", line.split(" task ")[0])}
    assert sealed == {"worker-0", "worker-1", "worker-2", "validator-0"}
    worker_store = BlobStore(Layout(home).worker_home(0) / "blobs")
    assert worker_store.has(spec["dataset"]["manifest_hash"])
    with pytest.raises(DataKeyError):  # anyone fetching these blobs from the worker without a sealed key
        load_dataset(spec["dataset"]["manifest_hash"], worker_store.get)
    assert processes_mentioning(str(home)) == []


# ------------------------------------------------------------------ worker killed, node restarted mid-task


def chain_snapshot(client: RpcClient, top: int) -> dict[int, tuple[str, str, list[str]]]:
    """height -> (block hash, app hash, hashes of its txs) for heights 1..top."""
    blocks = {}
    for high in range(top, 0, -20):
        result = client.call("blockchain", minHeight=str(max(1, high - 19)), maxHeight=str(high))
        for meta in result["block_metas"]:
            height = int(meta["header"]["height"])
            txs = []
            if int(meta["num_txs"]):
                raw = client.call("block", height=str(height))["block"]["data"]["txs"]
                txs = [hashlib.sha256(base64.b64decode(tx)).hexdigest().upper() for tx in raw]
            blocks[height] = (meta["block_id"]["hash"], meta["header"]["app_hash"], txs)
    return blocks


def task_round(rpc: str) -> tuple[int, str]:
    view = query(rpc, "/market/task/1")
    return (view["round"], view["phase"]) if view["status"] == "running" else (-1, view["status"])


def kill_service(home: Path, name: str) -> dict[int, str]:
    """SIGKILL a service's whole session, as a crash would; returns what was killed."""
    family = process_family({recorded_pids(home)[name]})
    for pid in family:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not survivors(family), 10, f"{name} to die")
    return family


def test_a_killed_worker_is_paid_only_for_verified_rounds_and_a_restarted_node_loses_nothing(tmp_path):
    home = tmp_path / "net"
    base = free_base_port()
    rpc = LocalnetConfig(base_port=base).rpc_url(0)
    with open(tmp_path / "demo.out", "w") as out, open(tmp_path / "demo.err", "w") as err:
        demo = subprocess.Popen([LOCALNET, "demo", "--keep", *SOLO, "--home", str(home), "--base-port", str(base),
                                 *DEMO_ARGS],
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    net = Localnet(home)
    try:
        # 1. worker-0 crashes once round 1 has begun: round 0 is its last work.
        wait_until(lambda: task_round(rpc)[0] >= 1, TASK_TIMEOUT, "round 1 of task 1")
        kill_service(home, "worker-0")

        # 2. The node crashes (app and engine at once) while the task runs, and comes back.
        with RpcClient(rpc, timeout=5.0) as client:
            height = client.status().latest_block_height
            before = chain_snapshot(client, height)
        kill_service(home, "app-0")
        kill_service(home, "engine-0")
        net.restart("app-0")
        net.restart("engine-0")
        with RpcClient(rpc, timeout=5.0) as client:
            wait_until(lambda: client.status().latest_block_height >= height + 3, 60, "blocks after the restart")
            after = chain_snapshot(client, height)
            assert after == before, "blocks (hashes, app hashes, txs) up to the crash must survive it"
            # The first block after the crash extends the last one from before it.
            assert client.block(height + 1).last_block_hash == before[height][0]
            transactions = [tx for _, _, txs in before.values() for tx in txs]
            assert transactions and all(client.find_tx(tx) is not None for tx in transactions)

        # 3. The task still completes, with the two workers left.
        demo.wait(timeout=TASK_TIMEOUT + 120)
        output = (tmp_path / "demo.out").read_text()
        assert demo.returncode == 0, output + (tmp_path / "demo.err").read_text()[-5000:]
        summary = last_json_line(output)
        assert summary["status"] == "completed" and summary["final_accuracy"] >= ACCURACY_FLOOR
        view = whole_task(functools.partial(query, rpc), 1)

        killed = assert_paid_exactly_for_passed_rounds(rpc, view, 0)
        # It left in round 1 (missed it, or committed it and then served nothing to verify), or, if round 1 was
        # verified in the second before the crash, in round 2; it did no work after the crash.
        assert killed["status"] in ("dropped", "slashed") and killed["left_round"] in (1, 2)
        rounds_done = [c["round"] for c in commitments_of(view, 0)]
        assert 0 in rounds_done and max(rounds_done) <= 1
        assert [c["outcome"] for c in commitments_of(view, 0) if c["round"] == 0] == ["passed"]
        assert killed["paid"] > 0 and summary["paid_per_worker"]["worker-0"] == killed["paid"]
        for index in (1, 2):
            member = assert_paid_exactly_for_passed_rounds(rpc, view, index)
            assert member["status"] == "finished" and member["paid"] > killed["paid"]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        net.down()
    assert processes_mentioning(str(home)) == []


# ------------------------------------------------------------------- a cheater; down; reset then up


def test_a_cheating_worker_is_slashed_and_down_then_reset_leave_a_clean_localnet(tmp_path):
    home = tmp_path / "net"
    base = free_base_port()
    rpc = LocalnetConfig(base_port=base).rpc_url(0)
    try:
        done = localnet("demo", "--console", *SOLO, "--cheat", "skipped_steps", "--home", str(home), "--base-port",
                        str(base), *DEMO_ARGS, timeout=TASK_TIMEOUT + 300)
        summary = last_json_line(done.stdout)
        console_url = LocalnetConfig(base_port=base).console_url()
        assert f"web console: {console_url}" in done.stderr + done.stdout  # printed once the localnet is up
        assert f"its web console stay up: {console_url}" in " ".join((done.stderr + done.stdout).split())
        assert summary["status"] == "completed" and summary["final_accuracy"] >= ACCURACY_FLOOR
        view = whole_task(functools.partial(query, rpc), 1)
        cheater = assert_paid_exactly_for_passed_rounds(rpc, view, 0)
        assert cheater["status"] == "slashed" and cheater["paid"] == 0
        assert cheater["slashed"] == view["collateral"] > 0
        (first,) = [c for c in commitments_of(view, 0) if c["round"] == 0]
        assert first["outcome"] == "failed" and "fail" in first["decisions"]  # its votes are deleted by now
        for index in (1, 2):
            honest = assert_paid_exactly_for_passed_rounds(rpc, view, index)
            assert honest["status"] == "finished" and honest["paid"] > 0 and honest["slashed"] == 0

        # Every service listens on 127.0.0.1 only, on the localnet's own ports.
        pids = recorded_pids(home)
        assert set(pids) == SERVICES
        family = process_family(set(pids.values()))
        listening = listening_sockets(family)
        config = LocalnetConfig(base_port=base)
        assert {address for address, _ in listening} == {"127.0.0.1"}
        assert {port for _, port in listening} >= ({config.rpc_port(0), config.console_port()}
                                                    | {config.blob_port(i) for i in range(3)})
        assert {port for _, port in listening} <= set(config.ports())

        # `down` ends every service and everything they started.
        old_height = query_height(rpc)
        localnet("down", "--home", str(home))
        assert survivors(family) == [] and processes_mentioning(str(home)) == []
        assert not list((home / "run").glob("*.pid"))
        status = json.loads(localnet("status", "--home", str(home), "--output", "json").stdout)
        assert status["height"] is None and status["services"] == {}

        # `reset` then `up` (in the foreground, as a user runs it): a new chain, without the old task.
        localnet("reset", "--yes", "--home", str(home))
        assert not home.exists()
        up = subprocess.Popen([LOCALNET, "up", *SOLO, "--workers", "0", "--home", str(home), "--base-port", str(base)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        status = wait_until(lambda: _all_running(home, {"app-0", "engine-0", "verifier-0", "console"}), 120,
                            "a fresh localnet")
        assert 1 <= status["height"] < old_height
        assert query(rpc, "/market/tasks")["tasks"] == []
        assert Layout(home).load().workers == 0
        # A running localnet is neither started twice nor wiped by a demo.
        for command in (["up", "-d"], ["demo"]):
            refused = localnet(*command, "--home", str(home), "--base-port", str(base), check=False)
            assert refused.returncode != 0 and "already running" in " ".join(refused.stderr.split())
        # Ctrl-C on `up` stops everything it started.
        family = process_family(set(recorded_pids(home).values()))
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0, up.stderr.read()
        assert survivors(family) == []
    finally:
        localnet("down", "--home", str(home), check=False)
    assert processes_mentioning(str(home)) == []


@pytest.mark.parametrize("cheat", ["arbitrary_start", "forged_final"])
def test_a_lone_worker_that_starts_where_it_likes_or_forges_its_final_weights_is_slashed_and_the_requester_refunded(
        tmp_path, cheat):
    """Issue 24 items 1 and 2: a one-worker task, so the cheater is every member and any majority there is.
    Its verifiers derive the round's start and the final weights themselves: the chain adopts neither its start
    nor its final hash, slashes its whole collateral, and refunds the requester what was not earned."""
    home = tmp_path / "net"
    base = free_base_port()
    rpc = LocalnetConfig(base_port=base).rpc_url(0)
    try:
        done = localnet("demo", "--keep", *SOLO, "--workers", "1", "--cheat", cheat, "--home", str(home),
                        "--base-port", str(base), "--rounds", "2", "--timeout", str(TASK_TIMEOUT),
                        timeout=TASK_TIMEOUT + 300, check=False)
        assert done.returncode != 0 and "without final weights" in " ".join(done.stderr.split()), done.stderr[-2000:]
        view = whole_task(functools.partial(query, rpc), 1)
        assert view["status"] == "abandoned" and view["final_weights_hash"] == ""
        cheater = assert_paid_exactly_for_passed_rounds(rpc, view, 0)
        assert cheater["status"] == "slashed" and cheater["slashed"] == view["collateral"] > 0
        assert cheater["rounds_passed"] == (2 if cheat == "forged_final" else 0)
        unspent = view["budget"] - view["paid_workers"] - view["paid_fees"]  # all of it when round 0 fails
        assert view["refunded"] == unspent and (unspent > 0) == (cheat == "arbitrary_start")
        assert view["escrow_remaining"] == 0
        failed = [dict(c, round=r["round"]) for r in view["round_details"] for c in r["commitments"]
                  if c["worker"] == worker_address(0) and c["outcome"] == "failed"]
        assert len(failed) == 1 and failed[0]["round"] == (2 if cheat == "forged_final" else 0)
        assert "fail" in failed[0]["decisions"]  # what its votes decided (they are deleted after the reveal window)
    finally:
        localnet("down", "--home", str(home), check=False)
    assert processes_mentioning(str(home)) == []


def _all_running(home: Path, services: set[str]) -> dict | None:
    status = json.loads(localnet("status", "--home", str(home), "--output", "json").stdout)
    running = {name for name, service in status["services"].items() if service["running"]}
    return status if running == services and status["height"] else None


def query_height(rpc: str) -> int:
    with RpcClient(rpc, timeout=5.0) as client:
        return client.status().latest_block_height


# ------------------------------------------------------------------------------------------- interrupted


def test_a_demo_terminated_midway_stops_everything_it_started(tmp_path):
    home = tmp_path / "net"
    demo = subprocess.Popen([LOCALNET, "demo", *SOLO, "--workers", "1", "--home", str(home), "--base-port",
                             str(free_base_port(workers=1))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # app, engine, verifier, worker and the console
        pids = wait_until(lambda: len(recorded_pids(home)) == 5 and recorded_pids(home), 120, "the demo's services")
        family = process_family(set(pids.values()))
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=60) == 128 + signal.SIGTERM  # stopped, and its status says it did not finish
        assert survivors(family) == [] and processes_mentioning(str(home)) == []
    finally:
        if demo.poll() is None:
            demo.kill()
        localnet("down", "--home", str(home), check=False)
