"""A real `trolly-node dev` process for end-to-end tests: started on a free loopback port, stopped afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Iterator

import pytest

from net_helpers import free_port
from trolly.chain.crypto import encode_address
from trolly.wallet.rpc import RpcClient
from trolly.wallet.sender import TxSender
from trolly.wallet.txbuilder import TxPlan
from whole_task import whole_task

BIN = pathlib.Path(sys.executable).parent
NODE_SCRIPT = BIN / "trolly-node"


def stop_process(process: subprocess.Popen, timeout: float = 15.0, signum: int = signal.SIGTERM) -> int:
    """Send `signum` to the process (not its group: for a process started in the test's own session), SIGKILL
    it if it does not exit in time; its exit status."""
    if process.poll() is None:
        process.send_signal(signum)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    return process.returncode


def stop_process_group(process: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL it if it does not exit in time."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@contextlib.contextmanager
def dev_node(home: pathlib.Path, block_time: str = "200ms", timeout: float = 60.0) -> Iterator[str]:
    """Run `trolly-node dev --home HOME` (initializing HOME unless it already holds a home) until the block
    at height 1 exists; yields the RPC URL; stops the node (and the app process it started) on exit."""
    if not NODE_SCRIPT.exists():
        pytest.skip(f"trolly-node console script not installed at {NODE_SCRIPT}")
    url = f"http://127.0.0.1:{free_port()}"
    log_path = home.parent / f"{home.name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(NODE_SCRIPT), "dev", "--home", str(home), "--block-time", block_time,
             "--rpc-laddr", url.replace("http://", "tcp://")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                pytest.fail(f"trolly-node dev exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(Exception):
                with RpcClient(url, timeout=2) as client:
                    if client.status().latest_block_height >= 1:
                        break
            if time.monotonic() > deadline:
                pytest.fail(f"trolly-node dev did not serve {url} within {timeout:.0f}s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        stop_process_group(process)


def dev_home_with_params(home: pathlib.Path, params: dict[str, dict]) -> pathlib.Path:
    """A dev home (`trolly-node init --dev`, as `trolly-node dev` writes one) whose genesis sets `params` (by
    section, over the dev genesis's own), written before the chain's first start as an operator edits genesis;
    `dev_node(home)` then runs it."""
    subprocess.run([str(NODE_SCRIPT), "init", "--home", str(home), "--chain-id", "trolly-dev", "--moniker",
                    "dev-validator", "--dev"], check=True, capture_output=True)
    genesis_path = home / "config" / "genesis.json"
    genesis = json.loads(genesis_path.read_text())
    for section, values in params.items():
        genesis["app_state"].setdefault("params", {}).setdefault(section, {}).update(values)
    genesis_path.write_text(json.dumps(genesis, indent=2))
    return home


def send_included(url: str, key, *messages):
    """Sign `messages` with `key`, send them to the node at `url` and wait for the block: the outcome, which must
    have been included with code 0."""
    with RpcClient(url, timeout=10) as client:
        sender = TxSender(client.async_client)

        async def go():
            plan = await sender.plan(encode_address(key.address), list(messages))
            return await sender.send(key, plan, wait=True, timeout=30)

        outcome = client.run(go())
    assert outcome.included.code == 0, outcome.included.log
    return outcome


class Client:
    """A JSON-RPC client of a dev node that signs with the chain's minimum fee and waits for a task's state."""

    def __init__(self, url: str) -> None:
        self.rpc = RpcClient(url, timeout=10)
        self.chain_id = self.rpc.status().chain_id
        self.fees_paid: dict[bytes, int] = {}

    def query(self, path: str):
        return self.rpc.query_json(path)

    def balance(self, key) -> int:
        return int(self.query(f"/account/{encode_address(key.address)}")["balance"])

    def send(self, key, *messages):
        """Sign with the chain's minimum fee for the tx's size, wait for its block; the fee is recorded."""
        nonce = int(self.query(f"/account/{encode_address(key.address)}")["nonce"])
        auth = self.query("/params/auth")
        plan = TxPlan(self.chain_id, nonce, 0, messages).with_minimum_fee(auth["min_fee"], auth["fee_per_byte"])
        result = self.rpc.broadcast_and_wait(plan.sign(key), timeout=30)
        assert result.code == 0, result.log
        self.fees_paid[key.address] = self.fees_paid.get(key.address, 0) + plan.fee
        return result

    def wait_for(self, task_id: int, predicate, what: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            view = whole_task(self.query, task_id)
            if predicate(view):
                return view
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {view['status']} {view['phase']}"
            time.sleep(0.1)
