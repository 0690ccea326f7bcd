"""End to end: a real `trolly-node dev`, a real `trolly-worker` process, a task submitted with the wallet
library; the worker is stopped (SIGTERM) in the middle of round 0, started again, killed (SIGKILL) further
into the same round, and started once more.

What must hold: the restarted worker resumes round 0 from its last saved checkpoint (its round-0 commitment
is exactly what an uninterrupted run produces), commits every round once, reports the final weights, and the
task settles (completed). The dev chain gets a short verification window through its genesis params so the
rounds settle quickly without a verifier (they settle as unverified: no pay, no slash).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from dev_node import stop_process_group
from net_helpers import free_port
from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto import market_pb2
from trolly.compute.checkpoints import decode_weights
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.spec import example_spec, parse_spec
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.wallet.rpc import RpcClient
from trolly.wallet.sender import TxSender
from trolly.wallet.txbuilder import send_message
from whole_task import whole_task

pytestmark = pytest.mark.slow

BIN = pathlib.Path(sys.executable).parent
NODE_SCRIPT = BIN / "trolly-node"
WORKER_SCRIPT = BIN / "trolly-worker"
MARKET_PARAMS = {"verification_window": 3, "min_worker_stake": 1_000_000, "min_collateral": 100_000}


def wait_until(predicate, timeout: float, what: str, process: subprocess.Popen | None = None, log: pathlib.Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            break
        time.sleep(0.1)
    detail = log.read_text()[-4000:] if log is not None and log.exists() else ""
    pytest.fail(f"timed out waiting for {what}:\n{detail}")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if not NODE_SCRIPT.exists() or not WORKER_SCRIPT.exists():
        pytest.skip(f"console scripts trolly-node / trolly-worker not installed in {BIN}")
    home = tmp_path_factory.mktemp("node")
    subprocess.run([str(NODE_SCRIPT), "init", "--home", str(home), "--chain-id", "trolly-dev", "--dev"],
                   check=True, capture_output=True)
    genesis_path = home / "config" / "genesis.json"
    genesis = json.loads(genesis_path.read_text())
    genesis["app_state"]["params"]["market"] = MARKET_PARAMS
    genesis_path.write_text(json.dumps(genesis, indent=2))
    url = f"http://127.0.0.1:{free_port()}"
    log_path = home.parent / "node.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(NODE_SCRIPT), "dev", "--home", str(home), "--block-time", "200ms",
                                    "--rpc-laddr", url.replace("http://", "tcp://")],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def ready():
            try:
                with RpcClient(url, timeout=2) as client:
                    return client.status().latest_block_height >= 1
            except Exception:
                return False

        wait_until(ready, 60, "the dev node", process, log_path)
        yield url
    finally:
        stop_process_group(process)


def send(url: str, key, *messages):
    with RpcClient(url, timeout=10) as client:
        sender = TxSender(client.async_client)

        async def go():
            plan = await sender.plan(encode_address(key.address), list(messages))  # the chain's minimum fee
            return await sender.send(key, plan, wait=True, timeout=30)

        return client.run(go())


def query(url: str, path: str):
    with RpcClient(url, timeout=10) as client:
        return client.query_json(path)


def start_worker(home: pathlib.Path, task_id: int, log_path: pathlib.Path, *extra: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [str(WORKER_SCRIPT), "start", "--home", str(home), "--max-tasks", "1", "--task", str(task_id),
             "--step-delay", "0.15", "--poll-interval", "0.2", "--no-progress",
             "--allow-private-blob-hosts", *extra],  # the test's blob services listen on 127.0.0.1
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})


def fetch_blob(base_url: str, digest: str) -> bytes | None:
    try:
        with urllib.request.urlopen(f"{base_url}/blobs/{digest}", timeout=5) as response:
            return response.read()
    except OSError:
        return None


def read_state(home: pathlib.Path) -> dict:
    try:
        return json.loads((home / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def test_worker_killed_mid_round_resumes_commits_once_and_the_task_settles(node, tmp_path):
    home = tmp_path / "worker"
    init = subprocess.run([str(WORKER_SCRIPT), "init", "--home", str(home), "--key", "worker", "--keyring-backend",
                           "test", "--create-key", "--node", node], capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    config = json.loads((home / "worker.json").read_text())
    blob_url = f"http://127.0.0.1:{config['blob_port']}"
    address = json.loads(next((home / "keyring-test").glob("worker.key.json")).read_text())["address"]
    send(node, dev_key(0), send_message(decode_address(address), 50_000_000))

    dataset_blobs = build_dataset("digits")
    document = example_spec(dataset_blobs.manifest_hash,
                            model={"arch": "mlp", "config": {"hidden": [32]}},
                            dataset={"name": "digits", "manifest_hash": dataset_blobs.manifest_hash, "urls": [blob_url]},
                            training={"rounds": 2, "inner_steps": 30, "batch_size": 16, "checkpoint_every": 5,
                                      "seed": 7, "inner_optimizer": {"name": "adamw", "lr": 0.003},
                                      "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9}},
                            codec="int8")
    spec_bytes = json.dumps(document).encode()
    requester = dev_key(0)
    submitted = send(node, requester, market_pb2.MsgSubmitTask(
        spec=spec_bytes, spec_hash=hashlib.sha256(spec_bytes).digest(), budget=10_000, workers=1, rounds=2,
        reward_per_round=1_000, collateral=100_000, join_blocks=1_000, round_blocks=400, samples_per_worker=1))
    assert submitted.included.code == 0
    task_id = max(t["id"] for t in query(node, "/market/tasks")["tasks"])

    log_path = tmp_path / "worker.log"

    def round_zero() -> dict:
        return read_state(home).get("tasks", {}).get(str(task_id), {}).get("rounds", {}).get("0", {})

    def trained_at_least(count: int):
        return lambda: len(round_zero().get("checkpoints", [])) >= count and not round_zero().get("commit_tx")

    # 1. Ctrl-C / SIGTERM in the middle of round 0: the worker stops at the next checkpoint, exit code 0.
    worker = start_worker(home, task_id, log_path)
    try:
        wait_until(trained_at_least(2), 120, "round 0 to start training", worker, log_path)
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(30) == 0, log_path.read_text()[-3000:]
    finally:
        stop_process_group(worker)
    assert "progress saved" in log_path.read_text()
    stopped_at = len(round_zero()["checkpoints"])

    # 2. Started again, it resumes; SIGKILL further on, still before the commitment.
    worker = start_worker(home, task_id, log_path)
    try:
        wait_until(trained_at_least(stopped_at + 2), 120, "round 0 to progress after the restart", worker, log_path)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    finally:
        stop_process_group(worker)
    killed_at = round_zero()
    view = whole_task(functools.partial(query, node), task_id)
    assert view["round"] == 0 and view["round_details"][0]["commitments"] == []
    assert stopped_at + 2 <= len(killed_at["checkpoints"]) < 7 and not killed_at["commit_tx"]

    # 3. Started once more, it finishes the round from where the kill left it and the whole task, then keeps
    #    serving (--linger) so the final weights can be downloaded by hash from its blob service.
    worker = start_worker(home, task_id, log_path, "--linger", "120")
    try:
        wait_until(lambda: query(node, f"/market/task/{task_id}")["status"] != "running", 240, "the task to end",
                   worker, log_path)
        # No validator verifies here: the task has no result (`final_weights_hash` stays empty), and the
        # weights the worker reported are the ones its final report names.
        ended = whole_task(functools.partial(query, node), task_id)
        assert ended["final_weights_hash"] == ""
        (report,) = ended["round_details"][-1]["commitments"]
        digest = report["start_weights_hash"]
        weights = wait_until(lambda: fetch_blob(blob_url, digest), 30, "the final weights to be served", worker, log_path)
        assert hashlib.sha256(weights).hexdigest() == digest
        assert set(decode_weights(weights)) == set(initial_weights(parse_spec(spec_bytes), dataset_from_blobs(dataset_blobs).shape))
        wait_until(lambda: "serving blobs for" in log_path.read_text(), 60, "the worker to finish the task", worker,
                   log_path)
        os.killpg(worker.pid, signal.SIGTERM)  # ends the linger at once
        assert worker.wait(30) == 0, log_path.read_text()[-4000:]
    finally:
        stop_process_group(worker)

    log_text = log_path.read_text()
    assert f"task {task_id} round 0: resuming from checkpoint {stopped_at - 1}" in log_text
    assert f"task {task_id} round 0: resuming from checkpoint {len(killed_at['checkpoints']) - 1}" in log_text
    view = whole_task(functools.partial(query, node), task_id)
    assert view["status"] == "completed", view
    for detail in view["round_details"]:
        assert [c["worker"] for c in detail["commitments"]] == [address], detail
    # register, join, two rounds and the final report: exactly five transactions, so no second commit was sent
    assert query(node, f"/account/{address}")["nonce"] == 5

    # The resumed round is byte for byte the round an uninterrupted worker trains.
    spec = parse_spec(spec_bytes)
    dataset = dataset_from_blobs(dataset_blobs)
    round_zero = view["round_details"][0]["commitments"][0]
    reference = run_round(Trainer(spec, dataset), initial_weights(spec, dataset.shape), worker_index=0,
                          round_index=0, steps=round_zero["steps"])
    assert round_zero["checkpoint_root"] == reference.checkpoint_root.hex()
    assert round_zero["start_weights_hash"] == reference.start_weights_hash.hex()

    # The final weights the worker reported are kept in its blob store (unverified here: no validator voted).
    state = read_state(home)["tasks"][str(task_id)]
    digest = view["round_details"][-1]["commitments"][0]["start_weights_hash"]
    assert state["status"] == "finished" and state["final_weights_hash"] == digest
    stored = home / "blobs" / "blobs" / digest[:2] / digest
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == digest
