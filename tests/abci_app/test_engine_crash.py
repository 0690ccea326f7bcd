"""Kill -9 the app at any point: the solo engine's handshake brings it back to the same height and app hash
as an uninterrupted run, with no transaction lost or applied twice. Real processes throughout:
`trolly-node start` (the app) and `trolly-node engine` (the solo engine), over a unix socket.

"Uninterrupted run" is checked by replaying: after the crashes, a brand-new app (empty state) is driven by
the engine's handshake through every stored block, and each block's app hash must equal the one recorded
during the crashing run (the engine stops with a HandshakeError otherwise).

Precise crash points use `tests/helpers/pausing_engine.py`, the engine with a step observer that stops it at a
block's step (see `trolly.abci_app.engine.producer.StepObserver`); the load test kills at random moments
instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from dev_node import stop_process
from engine_helpers import rpc_post, send_tx, wait_until
from net_helpers import free_port
from trolly.abci_app import home as homelib
from trolly.abci_app.seed import is_seed_tx
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.tx import decode_tx

pytestmark = pytest.mark.slow

DEV = dev_key(0)
CHAIN_ID = "crash-test"
RECIPIENTS = [hashlib.sha256(f"recipient-{i}".encode()).digest()[:20] for i in range(5)]
PAUSING_ENGINE = pathlib.Path(__file__).resolve().parents[1] / "helpers" / "pausing_engine.py"


class Processes:
    """The app and the engine of one home, started as `trolly-node` subprocesses with logs in the home."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.socket = f"unix://{root}/app.sock"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app: subprocess.Popen | None = None
        self.engine: subprocess.Popen | None = None
        self.starts = 0

    def _spawn(self, arguments: list[str], log_name: str, environment: dict | None = None,
               program: tuple[str, ...] = ("-m", "trolly.abci_app.cli")) -> subprocess.Popen:
        env = dict(os.environ, **(environment or {}))
        log = open(self.root / log_name, "ab")
        return subprocess.Popen([sys.executable, *program, *arguments], stdout=log, stderr=log, env=env)

    def start_app(self) -> None:
        self.starts += 1
        self.app = self._spawn(["start", "--home", str(self.root), "--abci", self.socket], "app.log",
                               {"PYTHONHASHSEED": str(self.starts)})

    def start_engine(self, pause: str = "", block_time: str = "100ms") -> None:
        """`trolly-node engine`, or with `pause` (`<step>:<height|txs>`) the same engine stopping once at that
        step (tests/helpers/pausing_engine.py)."""
        arguments = ["--home", str(self.root), "--proxy-app", self.socket,
                     "--rpc-laddr", f"tcp://127.0.0.1:{self.port}", "--block-time", block_time]
        if pause:
            self.engine = self._spawn(["--pause", pause, *arguments], "engine.log",
                                      program=(str(PAUSING_ENGINE),))
        else:
            self.engine = self._spawn(["engine", *arguments], "engine.log")

    def kill_app(self) -> None:
        self.app.send_signal(signal.SIGKILL)
        self.app.wait()

    def stop(self) -> None:
        for process in (self.engine, self.app):
            if process is not None:
                stop_process(process, 10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} ---\n" + (self.root / name).read_text(errors="replace")[-6000:]
            for name in ("app.log", "engine.log") if (self.root / name).exists()
        )

    # ---- RPC

    def call(self, method: str, params=None):
        try:
            return rpc_post(self.url, method, params)
        except OSError:
            return None

    def height(self) -> int:
        answer = self.call("status")
        return int(answer["result"]["sync_info"]["latest_block_height"]) if answer and "result" in answer else -1

    def account(self, address: bytes) -> dict | None:
        answer = self.call("abci_query", {"path": f"/account/{encode_address(address)}"})
        if not answer or "result" not in answer or answer["result"]["response"]["code"] != 0:
            return None
        return json.loads(base64.b64decode(answer["result"]["response"]["value"]))

    def broadcast(self, tx: bytes):
        return self.call("broadcast_tx_sync", {"tx": base64.b64encode(tx).decode()})

    def block(self, height: int) -> dict:
        return self.call("block", {"height": str(height)})["result"]

    def block_results(self, height: int) -> dict:
        return self.call("block_results", {"height": str(height)})["result"]


@pytest.fixture
def processes(tmp_path):
    root = tmp_path / "home"
    homelib.init_home(root, CHAIN_ID, dev=True)
    running = Processes(root)
    yield running
    running.stop()


def included_txs(processes: Processes, up_to: int) -> list[bytes]:
    txs = []
    for height in range(1, up_to + 1):
        txs.extend(tx for tx in map(base64.b64decode, processes.block(height)["block"]["data"]["txs"])
                   if not is_seed_tx(tx))  # the app's own, from the engine's vote extensions
    return txs


def check_no_loss_no_double(processes: Processes, accepted: set[bytes]) -> int:
    """Every accepted tx is in exactly one block, and balances equal the sum of what the blocks carry."""
    height = processes.height()
    txs = included_txs(processes, height)
    hashes = [hashlib.sha256(tx).digest() for tx in txs]
    assert len(hashes) == len(set(hashes)), "a transaction was included twice"
    missing = {tx for tx in accepted if hashlib.sha256(tx).digest() not in set(hashes)}
    assert not missing, f"{len(missing)} accepted transactions were lost"
    expected: dict[bytes, int] = {}
    for tx in txs:
        for message in decode_tx(tx).body.messages:
            send = MsgSend.FromString(message.value)
            expected[send.to] = expected.get(send.to, 0) + send.amount
    for recipient in RECIPIENTS:
        assert (processes.account(recipient) or {"balance": 0})["balance"] == expected.get(recipient, 0)
    assert processes.account(DEV.address)["nonce"] == len(txs)
    return height


def check_replay_into_fresh_app(processes: Processes, up_to: int) -> None:
    """A fresh app fed the stored blocks by the handshake reaches the same app hash at every height."""
    recorded = {h: processes.block_results(h)["app_hash"] for h in range(1, up_to + 1)}
    processes.stop()
    shutil.move(processes.root / "data" / homelib.APPLICATION_DB, processes.root / "crashed-application.db")
    processes.start_app()
    processes.start_engine()

    def app_height() -> int:
        answer = processes.call("abci_info")
        return int(answer["result"]["response"].get("last_block_height", 0)) if answer and "result" in answer else 0

    wait_until(lambda: app_height() > up_to or processes.engine.poll() is not None, 60, what="replay")
    assert processes.engine.poll() is None, "the engine stopped: replay disagreed with the recorded app hashes"
    for height in range(1, up_to + 1):
        assert processes.block_results(height)["app_hash"] == recorded[height]
    info = processes.call("abci_query", {"path": f"/account/{encode_address(DEV.address)}"})["result"]["response"]
    assert int(info["height"]) >= up_to


def submit(processes: Processes, first_nonce: int, count: int, accepted: set[bytes]) -> None:
    for nonce in range(first_nonce, first_nonce + count):
        tx = send_tx(DEV, CHAIN_ID, nonce, RECIPIENTS[nonce % len(RECIPIENTS)], 1000 + nonce)
        answer = processes.broadcast(tx)
        assert answer and "result" in answer and answer["result"]["code"] == 0, answer
        accepted.add(tx)


@pytest.mark.parametrize("point", ["before_finalize", "after_finalize", "after_commit"])
def test_kill_app_at_a_precise_step_then_handshake_recovers(processes, point):
    processes.start_app()
    processes.start_engine(pause=f"{point}:txs")
    accepted: set[bytes] = set()
    try:
        wait_until(lambda: processes.height() >= 2, 60, what="first blocks")
        submit(processes, 0, 15, accepted)
        marker = wait_until(lambda: next((processes.root / "data").glob(f"engine-paused-{point}-*"), None), 30, what="pause")
        processes.kill_app()
        marker.unlink()
        time.sleep(0.5)  # the engine notices the dead app while it is down
        processes.start_app()
        wait_until(lambda: (processes.account(DEV.address) or {}).get("nonce") == 15, 120, what="recovery")
        submit(processes, 15, 5, accepted)
        wait_until(lambda: processes.account(DEV.address)["nonce"] == 20, 60, what="later txs")
        height = check_no_loss_no_double(processes, accepted)
        check_replay_into_fresh_app(processes, height)
    except AssertionError:
        print(processes.logs())
        raise


def test_many_random_kills_under_load(processes):
    processes.start_app()
    processes.start_engine()
    accepted: set[bytes] = set()
    stop = threading.Event()
    errors: list[str] = []

    def load() -> None:
        """Send txs with sequential nonces; after any failure, resynchronise the nonce from committed state."""
        nonce = 0
        while not stop.is_set():
            tx = send_tx(DEV, CHAIN_ID, nonce, RECIPIENTS[nonce % len(RECIPIENTS)], 1 + nonce % 97)
            answer = processes.broadcast(tx)
            if answer and "result" in answer and answer["result"]["code"] == 0:
                accepted.add(tx)
                nonce += 1
                continue
            time.sleep(0.1)
            pending = processes.call("num_unconfirmed_txs")
            committed = processes.account(DEV.address)
            if pending and "result" in pending and pending["result"]["n_txs"] == "0" and committed is not None:
                nonce = committed["nonce"]

    random_source = random.Random(20261122)
    try:
        wait_until(lambda: processes.height() >= 2, 60, what="first blocks")
        sender = threading.Thread(target=load, daemon=True)
        sender.start()
        kills = 0
        for _ in range(8):
            # Let the engine reconnect and make blocks again, then kill at a random moment of the work.
            resumed_from = processes.height()
            wait_until(lambda: processes.height() > resumed_from, 60, what="blocks after a restart")
            time.sleep(random_source.uniform(0.0, 0.5))
            processes.kill_app()
            kills += 1
            time.sleep(random_source.uniform(0.0, 0.3))
            processes.start_app()
        time.sleep(1.0)
        stop.set()
        sender.join(30)
        assert len(accepted) > 20, f"the load barely ran ({len(accepted)} txs accepted)"
        wait_until(lambda: (processes.call("num_unconfirmed_txs") or {}).get("result", {}).get("n_txs") == "0", 60,
                   what="mempool drain")
        start = processes.height()
        wait_until(lambda: processes.height() >= start + 2, 30, what="two more blocks")
        height = check_no_loss_no_double(processes, accepted)
        check_replay_into_fresh_app(processes, height)
    except AssertionError:
        print(errors, processes.logs())
        raise
    finally:
        stop.set()


def test_kill_engine_between_finalize_and_commit_then_restart(processes):
    """The other side: the engine dies with a decided block the app has not committed; the running app gets
    it replayed (FinalizeBlock again, then Commit) by the restarted engine's handshake. Txs that were only in
    the engine's mempool are lost with it, as in CometBFT, and the client resends them."""
    processes.start_app()
    processes.start_engine(pause="after_finalize:txs")
    accepted: set[bytes] = set()
    try:
        wait_until(lambda: processes.height() >= 2, 60, what="first blocks")
        submit(processes, 0, 10, accepted)
        marker = wait_until(lambda: next((processes.root / "data").glob("engine-paused-after_finalize-*"), None), 30,
                            what="pause")
        processes.engine.send_signal(signal.SIGKILL)
        processes.engine.wait()
        marker.unlink()
        processes.start_engine()
        # The decided block is replayed; what was only in the dead engine's mempool is gone (as with
        # CometBFT, whose mempool is not persisted), so the client resends what is not in a block yet.
        wait_until(lambda: (processes.account(DEV.address) or {}).get("nonce", 0) > 0, 60, what="replay")
        for tx in sorted(accepted, key=lambda raw: decode_tx(raw).body.nonce):
            found = processes.call("tx", {"hash": base64.b64encode(hashlib.sha256(tx).digest()).decode()})
            if "error" in found:
                answer = processes.broadcast(tx)
                assert answer and answer["result"]["code"] == 0, answer
        wait_until(lambda: (processes.account(DEV.address) or {}).get("nonce") == 10, 120, what="recovery")
        height = check_no_loss_no_double(processes, accepted)
        check_replay_into_fresh_app(processes, height)
    except AssertionError:
        print(processes.logs())
        raise
