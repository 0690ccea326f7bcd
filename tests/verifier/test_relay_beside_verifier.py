"""`trolly-verifier start --relay-port P` serves a blob relay in the verifier's process (as each validator of a
localnet does), and stops it with the verifier; a port already taken is a clear error."""

from __future__ import annotations

import json
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from dev_node import dev_node, stop_process_group
from net_helpers import free_port

from trolly.chain.hd import DEV_MNEMONIC
from trolly.wallet.keyring import Keyring
from trolly.wallet.passwords import PasswordSource

VERIFIER = pathlib.Path(sys.executable).parent / "trolly-verifier"


def start_verifier(node: str, tmp_path: pathlib.Path, port: int) -> tuple[subprocess.Popen, pathlib.Path]:
    log = tmp_path / "verifier.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(VERIFIER), "start", "--node", node, "--home", str(tmp_path / "verifier"), "--key", "validator",
             "--wallet-home", str(tmp_path / "wallet"), "--keyring-backend", "test", "--relay-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def health(url: str):
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_the_verifier_serves_a_relay_beside_it_and_stops_it_with_itself(tmp_path):
    if not VERIFIER.exists():
        pytest.skip(f"console script not installed at {VERIFIER}")
    Keyring(tmp_path / "wallet", "test", PasswordSource.fixed("unused")).recover("validator", DEV_MNEMONIC)
    with dev_node(tmp_path / "node") as node:
        port = free_port()
        process, log = start_verifier(node, tmp_path, port)
        try:
            deadline = time.monotonic() + 120
            while health(f"http://127.0.0.1:{port}") != {"ok": True, "relay": True}:
                assert process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.3)
            assert (tmp_path / "verifier" / "relay" / "blobs").is_dir()
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0, log.read_text()[-3000:]
            assert health(f"http://127.0.0.1:{port}") is None
            assert "relay serving at" in log.read_text()

            with socket.socket() as taken:
                taken.bind(("127.0.0.1", 0))
                taken.listen()
                busy, busy_log = start_verifier(node, tmp_path, taken.getsockname()[1])
                assert busy.wait(120) == 1
                assert "Error: cannot serve the relay on 127.0.0.1" in busy_log.read_text()
        finally:
            stop_process_group(process)
