"""A dev node with something to show, and a console to show it: for the console's HTTP and browser tests.

`busy_node` starts `trolly-node dev`, registers the dev key as a worker, submits a one-worker task and joins it
(so the task runs, with a member and round 0), all through the wallet's own CLI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import subprocess
import sys
import time
from typing import Iterator

import pytest
from click.testing import CliRunner

from dev_node import dev_node, free_port, stop_process_group
from market_helpers import spec_bytes
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.wallet.cli import cli

DEV_ADDRESS = encode_address(dev_key(0).address)
CONSOLE_SCRIPT = pathlib.Path(sys.executable).parent / "trolly-console"


@dataclasses.dataclass(frozen=True)
class BusyNode:
    url: str
    task_id: int
    join_tx: str
    """The hash of the worker's join transaction (for the search by transaction hash)."""


def wallet(home: pathlib.Path, node: str, *args: str, input: str | None = None) -> str:
    env = {"TROLLY_WALLET_HOME": str(home), "TROLLY_KEYRING_BACKEND": "test", "TROLLY_NODE": node,
           "TROLLY_WALLET_PASSWORD": ""}
    result = CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@contextlib.contextmanager
def busy_node(tmp: pathlib.Path) -> Iterator[BusyNode]:
    with dev_node(tmp / "node") as url:
        home = tmp / "wallet"
        wallet(home, url, "keys", "add", "dev", "--recover", "-o", "json", input=DEV_MNEMONIC + "\n")
        wallet(home, url, "worker", "register", "--stake", "10trl", "--blob-url", "http://127.0.0.1:8700", "--samples-per-second", "100",
               "--from", "dev", "--yes", "-o", "json")
        spec = tmp / "spec.json"
        spec.write_bytes(spec_bytes())
        wallet(home, url, "task", "submit", str(spec), "--budget", "50trl", "--workers", "1", "--from", "dev",
               "--yes")
        joined = json.loads(wallet(home, url, "worker", "join", "1", "--from", "dev", "--yes", "-o", "json"))
        yield BusyNode(url, 1, joined["hash"])


@contextlib.contextmanager
def console_process(node_url: str, log: pathlib.Path, timeout: float = 30.0) -> Iterator[str]:
    """`trolly-console --node NODE --port <free>` as a real process; yields its URL."""
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen([str(CONSOLE_SCRIPT), "--port", str(port), "--node", node_url], stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while "Trolly console:" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"trolly-console did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process_group(process)
