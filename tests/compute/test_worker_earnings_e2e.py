"""End to end (issue 28 items 1, 4, 5): a real `trolly-node dev`, a real `trolly-verifier` voting, a real
`trolly-worker` initialised with `init` (which measures the machine), registered from that measurement, and a
task run to completion. `trolly-worker earnings -o json` then gives the task's pay per round, its join and
commitment fees and the collateral locked and returned; the pay equals the chain's `payout` events (read from
`block_results`) to the unit, and pay less fees equals the worker's balance change over the task. `trolly-worker
why` finds nothing unpaid; `trolly-wallet task why` says why no worker joins a task that asks for more threads
than any registered worker has; unknown task ids are refused with `Error:` and a non-zero exit."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from trolly.chain.crypto import decode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.chain.proto import market_pb2
from trolly.compute.data import build_dataset
from trolly.compute.spec import example_spec
from trolly.wallet.errors import QueryFailed
from trolly.wallet.keyring import Keyring
from trolly.wallet.market_queries import get_market_params
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.rpc import RpcClient
from trolly.wallet.tasks import plan_task
from trolly.wallet.txbuilder import send_message

from dev_node import dev_node, send_included, stop_process_group

pytestmark = pytest.mark.slow

BIN = pathlib.Path(sys.executable).parent
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(*command, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / command[0]), *map(str, command[1:])], capture_output=True, text=True,
                            env=ENVIRONMENT, timeout=120)
    assert not check or result.returncode == 0, result.stdout + result.stderr
    return result


def submit(url: str, spec: bytes, budget: int = 1_000_000) -> int:
    with RpcClient(url, timeout=10) as client:
        plan = plan_task(spec, client.run(get_market_params(client.async_client)), budget, None, 1, 1, None)
    send_included(url, dev_key(0), market_pb2.MsgSubmitTask(
        spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=budget, workers=1, rounds=plan.rounds,
        reward_per_round=plan.reward_per_round, collateral=plan.collateral, join_blocks=1_000, round_blocks=400,
        samples_per_worker=1))
    with RpcClient(url, timeout=10) as client:
        return max(task["id"] for task in client.query_json("/market/tasks")["tasks"])


def query(url: str, path: str):
    with RpcClient(url, timeout=10) as client:
        return client.query_json(path)


def is_registered(url: str, address: str) -> bool:
    try:
        return query(url, f"/market/worker/{address}")["registered"]
    except QueryFailed:  # not registered (yet)
        return False


def wait_until(predicate, timeout: float, what: str, processes=(), logs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if any(process.poll() is not None for process in processes):
            break
        time.sleep(0.3)
    tails = "\n".join(f"--- {log}:\n{log.read_text()[-3000:]}" for log in logs if log.exists())
    pytest.fail(f"timed out waiting for {what}\n{tails}")


def payout_events(url: str, first: int, last: int, worker: str) -> int:
    """The sum of the market's `payout` events for `worker` in blocks first..last (transactions' and the block's
    own events)."""
    total = 0
    with RpcClient(url, timeout=10) as client:
        for height in range(first, last + 1):
            results = client.call("block_results", height=str(height))
            events = list(results.get("finalize_block_events") or [])
            for tx in results.get("txs_results") or []:
                events += tx.get("events") or []
            for event in events:
                attributes = {a["key"]: a["value"] for a in event.get("attributes") or []}
                if event["type"] == "task" and attributes.get("action") == "payout" and attributes["worker"] == worker:
                    total += int(attributes["amount"])
    return total


def test_earnings_match_the_chain_and_the_balance_and_why_explains_a_task_nobody_joins(tmp_path):
    with dev_node(tmp_path / "node", block_time="500ms") as url:
        wallet_home = tmp_path / "validator-wallet"
        Keyring(wallet_home, "test", PasswordSource.fixed("unused")).recover("validator", DEV_MNEMONIC)
        logs = [tmp_path / "verifier.log", tmp_path / "worker.log"]
        with open(logs[0], "wb") as log:
            verifier = subprocess.Popen(
                [str(BIN / "trolly-verifier"), "start", "--node", url, "--home", str(tmp_path / "verifier"),
                 "--key", "validator", "--wallet-home", str(wallet_home), "--keyring-backend", "test",
                 "--poll-interval", "0.5", "--retry-delay", "0.5", "--allow-private-blob-hosts"],
                stdout=log, stderr=subprocess.STDOUT, env=ENVIRONMENT, start_new_session=True)
        worker = None
        try:
            home = tmp_path / "worker"
            init = run("trolly-worker", "init", "--home", home, "--key", "worker", "--keyring-backend", "test",
                       "--create-key", "--node", url)
            assert "Measured this machine" in init.stdout and "largest models" in init.stdout
            address = Keyring(home, "test").get("worker").address
            send_included(url, dev_key(0), send_message(decode_address(address), 50_000_000))
            blob_url = f"http://127.0.0.1:{json.loads((home / 'worker.json').read_text())['blob_port']}"
            digits = build_dataset("digits")
            spec = json.dumps(example_spec(
                digits.manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}}, codec="int8",
                dataset={"name": "digits", "manifest_hash": digits.manifest_hash, "urls": [blob_url]},
                training={"rounds": 2, "inner_steps": 10, "batch_size": 8, "checkpoint_every": 5, "seed": 3})).encode()

            with open(logs[1], "wb") as log:
                worker = subprocess.Popen(
                    [str(BIN / "trolly-worker"), "start", "--home", str(home), "--max-tasks", "1", "--no-progress",
                     "--poll-interval", "0.2", "--allow-private-blob-hosts", "--linger", "600"],
                    stdout=log, stderr=subprocess.STDOUT, env=ENVIRONMENT, start_new_session=True)
            wait_until(lambda: is_registered(url, address), 120,
                       "the worker to register", [worker], logs)
            registered = query(url, f"/market/worker/{address}")["hardware"]
            preflight = json.loads(run("trolly-worker", "preflight", "--home", home, "-o", "json").stdout)
            assert registered["memory_mb"] == preflight["memory_mb"] and registered["threads"] == preflight["cores"]
            before = int(query(url, f"/account/{address}")["balance"])

            task_id = submit(url, spec)
            wait_until(lambda: query(url, f"/market/task/{task_id}")["status"] != "running"
                       and query(url, f"/market/task/{task_id}")["status"] != "open", 300, "the task to end",
                       [worker, verifier], logs)
            ended = query(url, f"/market/task/{task_id}")
            assert ended["status"] == "completed", ended
            after = int(query(url, f"/account/{address}")["balance"])

            report = json.loads(run("trolly-worker", "earnings", "--home", home, "-o", "json").stdout)
            (earned,) = report["tasks"]
            assert earned["task_id"] == task_id and earned["member_status"] == "finished"
            assert earned["collateral_locked"] == earned["collateral_returned"] == ended["collateral"]
            assert [r["outcome"] for r in earned["rounds"]] == ["passed", "passed", "final report"]
            assert earned["pay"] > 0 and all(r["fees"] > 0 for r in earned["rounds"]) and earned["join_fee"] > 0
            assert earned["pay"] == payout_events(url, ended["started_height"], ended["ended_height"], address)
            assert after - before == earned["net"] == earned["pay"] - earned["fees"]
            assert report["other_fees"] > 0  # registering
            assert report["stake"] == query(url, f"/market/worker/{address}")["stake"] and report["unbonding"] == 0
            text = run("trolly-worker", "earnings", "--home", home).stdout
            assert f"task {task_id} (completed, finished): pay {earned['pay']} utrl" in text

            why = run("trolly-worker", "why", task_id, "--home", home)
            assert "nothing unpaid" in why.stdout
            unknown = run("trolly-worker", "why", 999, "--home", home, check=False)
            assert unknown.returncode != 0 and "Error:" in unknown.stderr

            # A task asking for more threads than this worker has: nobody joins, and the wallet says why.
            greedy = json.loads(spec)
            greedy["determinism"] = {"threads": 4096}
            hungry_id = submit(url, json.dumps(greedy).encode())
            said = run("trolly-wallet", "task", "why", hungry_id, "--node", url)
            assert f"task {hungry_id}: open, 0 of 1 worker(s) joined" in said.stdout
            assert f"{address} (" in said.stdout and f"threads {preflight['cores']} < 4096" in said.stdout
            assert "no registered worker meets every requirement" in said.stdout
            as_json = json.loads(run("trolly-wallet", "task", "why", hungry_id, "--node", url, "-o", "json").stdout)
            assert as_json["requirements"]["threads"] == 4096
            assert [w["shortfalls"] for w in as_json["workers"]] == [[f"threads {preflight['cores']} < 4096"]]
            refused = run("trolly-wallet", "task", "why", 999, "--node", url, check=False)
            assert refused.returncode != 0 and "Error:" in refused.stderr
        finally:
            for process in (worker, verifier):
                if process is not None:
                    stop_process_group(process)
