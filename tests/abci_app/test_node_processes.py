"""`trolly-node start`, `engine` and `dev` as real processes; the real-CometBFT path when a binary exists."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from typing import Iterator

import pytest

from dev_node import stop_process
from engine_helpers import rpc_post, send_tx, wait_until
from net_helpers import free_port, free_ports
from trolly.abci_app import home as homelib
from trolly.abci_app.engine.abci_client import AbciClient
from trolly.abci_app.engine.chainstate import init_chain_request
from trolly.abci_app.proto.tendermint.abci import types_pb2
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key

pytestmark = pytest.mark.slow


def node(*arguments: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trolly.abci_app.cli", *arguments], **options)


def wait_for_socket(path: pathlib.Path) -> None:
    wait_until(lambda: path.exists(), 30, what=f"the app socket {path}")


def test_start_serves_abci_without_cometbft(tmp_path):
    paths = homelib.init_home(tmp_path / "h", "start-test", dev=True)
    socket_path = tmp_path / "app.sock"
    app = node("start", "--home", str(paths.root), "--abci", f"unix://{socket_path}", stderr=subprocess.PIPE)
    try:
        wait_for_socket(socket_path)

        async def drive():
            client = await AbciClient.connect(f"unix://{socket_path}")
            try:
                assert await client.echo("hello") == "hello"
                info = await client.info(types_pb2.RequestInfo(version="0.38.17"))
                assert info.last_block_height == 0 and info.app_version == 1
                genesis = homelib.load_home(paths.root).genesis
                response = await client.init_chain(init_chain_request(genesis))
                assert len(response.app_hash) == 32
                checked = await client.check_tx(b"not a transaction")
                assert checked.code != 0 and checked.log
            finally:
                await client.close()

        asyncio.run(drive())
    finally:
        assert stop_process(app) == 0
    assert not socket_path.exists()  # removed on a clean stop


def test_start_listens_on_config_proxy_app_by_default(tmp_path):
    port = free_port()
    config = homelib.NodeConfig(proxy_app=f"tcp://127.0.0.1:{port}")
    homelib.write_home(tmp_path / "h", homelib.dev_genesis("tcp-test", [homelib.ValidatorKey.generate().pubkey]),
                       homelib.ValidatorKey.generate(), config=config)
    app = node("start", "--home", str(tmp_path / "h"))
    try:
        async def ping():
            client = await AbciClient.connect_with_retry(f"tcp://127.0.0.1:{port}")
            try:
                return await client.echo("tcp")
            finally:
                await client.close()

        assert asyncio.run(asyncio.wait_for(ping(), 30)) == "tcp"
    finally:
        stop_process(app)


def test_start_without_a_home_fails_clearly(tmp_path):
    result = subprocess.run([sys.executable, "-m", "trolly.abci_app.cli", "start", "--home", str(tmp_path / "none")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "trolly-node init" in result.stderr


def test_dev_runs_a_chain_that_accepts_transactions_and_resumes(tmp_path):
    root = tmp_path / "dev"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    arguments = ["dev", "--home", str(root), "--block-time", "100ms", "--rpc-laddr", f"tcp://127.0.0.1:{port}"]
    log = open(tmp_path / "dev.log", "wb")
    process = node(*arguments, stdout=subprocess.PIPE, stderr=log)
    try:
        banner = b""
        deadline = time.monotonic() + 60
        while b"Stop with Ctrl-C" not in banner and time.monotonic() < deadline:
            banner += process.stdout.readline()
        text = banner.decode()
        assert f"RPC:         http://127.0.0.1:{port}" in text and "chain id:    trolly-dev" in text
        assert encode_address(dev_key(0).address) in text and DEV_MNEMONIC in text and "INSECURE" in text
        recipient = b"\x07" * 20
        tx = send_tx(dev_key(0), "trolly-dev", 0, recipient, 1234)
        answer = rpc_post(url, "broadcast_tx_commit", {"tx": base64.b64encode(tx).decode()})["result"]
        assert answer["tx_result"]["code"] == 0
        height = int(rpc_post(url, "status")["result"]["sync_info"]["latest_block_height"])
    finally:
        assert stop_process(process, signum=signal.SIGINT) == 0
    app_log = (tmp_path / "dev.log").read_text()
    assert "ABCI server stopped" in app_log and "block 1: 0 txs" in app_log  # the child app stopped too

    process = node(*arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _height(url) > height, 60, what="the resumed chain")
        query = rpc_post(url, "abci_query", {"path": f"/account/{encode_address(recipient)}"})["result"]["response"]
        assert json.loads(base64.b64decode(query["value"]))["balance"] == 1234
    finally:
        assert stop_process(process, signum=signal.SIGINT) == 0

    process = node(*arguments, "--reset", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: 0 < _height(url), 60, what="the reset chain")
        assert _height(url) < height + 5
        query = rpc_post(url, "abci_query", {"path": f"/account/{encode_address(recipient)}"})["result"]["response"]
        assert json.loads(base64.b64decode(query["value"]))["balance"] == 0
    finally:
        stop_process(process, signum=signal.SIGINT)


def _height(url: str) -> int:
    try:
        return int(rpc_post(url, "status")["result"]["sync_info"]["latest_block_height"])
    except OSError:
        return -1


def test_engine_refuses_an_app_ahead_of_its_block_store(tmp_path):
    root = tmp_path / "h"
    homelib.init_home(root, "ahead-test", dev=True)
    socket_address = f"unix://{tmp_path}/app.sock"
    port = free_port()
    engine_arguments = ["engine", "--home", str(root), "--proxy-app", socket_address,
                        "--rpc-laddr", f"tcp://127.0.0.1:{port}", "--block-time", "50ms"]
    app = node("start", "--home", str(root), "--abci", socket_address, stderr=subprocess.DEVNULL)
    try:
        engine = node(*engine_arguments, stderr=subprocess.DEVNULL)
        wait_until(lambda: _height(f"http://127.0.0.1:{port}") >= 3, 60, what="three blocks")
        assert stop_process(engine) == 0
        shutil.rmtree(root / "data" / homelib.ENGINE_DB)  # the engine forgets the chain; the app remembers it
        result = subprocess.run([sys.executable, "-m", "trolly.abci_app.cli", *engine_arguments],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert "the app is at height" in result.stderr and "block store ends at 0" in result.stderr
    finally:
        stop_process(app)


def _cometbft_or_reason() -> tuple[str | None, str]:
    from trolly.abci_app.cometbft import CometbftError, find_cometbft

    try:
        return find_cometbft().path, ""
    except CometbftError as exc:
        return None, str(exc)


COMETBFT, NO_COMETBFT = _cometbft_or_reason()


@contextlib.contextmanager
def cometbft_node(root: pathlib.Path, chain_id: str) -> Iterator[str]:
    """A one-validator dev chain at `root` on free loopback ports: `trolly-node start` driven by the real CometBFT
    over TCP, 200 ms blocks; yields the RPC URL; stops both on exit."""
    rpc_port, p2p_port, abci_port = free_ports(3)
    config = homelib.NodeConfig(proxy_app=f"tcp://127.0.0.1:{abci_port}", rpc_laddr=f"tcp://127.0.0.1:{rpc_port}",
                                p2p_laddr=f"tcp://127.0.0.1:{p2p_port}", timeout_commit="200ms")
    homelib.init_home(root, chain_id, dev=True, config=config)
    app = node("start", "--home", str(root), stderr=subprocess.DEVNULL)
    cometbft = subprocess.Popen([COMETBFT, "node", "--home", str(root)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{rpc_port}"
    finally:
        stop_process(cometbft)
        stop_process(app)


@pytest.mark.skipif(COMETBFT is None, reason=f"needs CometBFT v0.38 (the venv's, or on PATH): {NO_COMETBFT}")
def test_real_cometbft_drives_trolly_node_start(tmp_path):
    with cometbft_node(tmp_path / "h", "cometbft-test") as url:
        wait_until(lambda: _height(url) >= 3, 120, what="CometBFT blocks")
        tx = send_tx(dev_key(0), "cometbft-test", 0, b"\x09" * 20, 10)
        answer = rpc_post(url, "broadcast_tx_commit", {"tx": base64.b64encode(tx).decode()})["result"]
        assert answer["tx_result"]["code"] == 0


def _run_chain(root: pathlib.Path, socket_address: str, until_height: int, tx: bytes | None = None) -> int:
    """Run app + engine on `root` until `until_height` (sending `tx` first, if any); returns the height."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    app = node("start", "--home", str(root), "--abci", socket_address, stderr=subprocess.DEVNULL)
    engine = node("engine", "--home", str(root), "--proxy-app", socket_address, "--rpc-laddr", f"tcp://127.0.0.1:{port}",
                  "--block-time", "50ms", stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _height(url) >= 1, 60, what="first block")
        if tx is not None:
            wait_until(lambda: "result" in rpc_post(url, "abci_info"), 30, what="handshake")
            assert rpc_post(url, "broadcast_tx_commit", {"tx": base64.b64encode(tx).decode()})["result"]["tx_result"]["code"] == 0
        wait_until(lambda: _height(url) >= until_height, 60, what=f"height {until_height}")
    finally:
        stop_process(engine)
        stop_process(app)
    return _height_of_store(root)


def _height_of_store(root: pathlib.Path) -> int:
    from trolly.abci_app.engine.blockstore import BlockStore

    store = BlockStore(root / "data" / homelib.ENGINE_DB)
    try:
        return store.last_height
    finally:
        store.close()


def test_engine_refuses_an_app_whose_hash_differs_from_the_block_store(tmp_path):
    original = tmp_path / "a"
    homelib.init_home(original, "fork-test", dev=True)
    fork = tmp_path / "b"
    shutil.copytree(original, fork)  # same genesis and keys: the chains differ only by what the blocks carry
    socket_address = f"unix://{tmp_path}/app.sock"
    with_tx = _run_chain(original, socket_address, 4, send_tx(dev_key(0), "fork-test", 0, b"\x03" * 20, 5))
    _run_chain(fork, socket_address, with_tx + 3)
    shutil.rmtree(fork / "data" / homelib.APPLICATION_DB)
    shutil.copytree(original / "data" / homelib.APPLICATION_DB, fork / "data" / homelib.APPLICATION_DB)
    app = node("start", "--home", str(fork), "--abci", socket_address, stderr=subprocess.DEVNULL)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "trolly.abci_app.cli", "engine", "--home", str(fork), "--proxy-app", socket_address,
             "--rpc-laddr", f"tcp://127.0.0.1:{free_port()}"],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        stop_process(app)
    assert result.returncode != 0 and "app hash mismatch" in result.stderr, result.stderr[-2000:]


def test_dev_fails_when_its_app_cannot_start(tmp_path):
    root = tmp_path / "dev"
    homelib.init_home(root, "locked-test", dev=True)
    from trolly.abci_app.store import Store

    holder = Store(root / "data" / homelib.APPLICATION_DB)  # holds the LevelDB lock: the child app cannot open it
    try:
        result = subprocess.run(
            [sys.executable, "-m", "trolly.abci_app.cli", "dev", "--home", str(root), "--rpc-laddr", f"tcp://127.0.0.1:{free_port()}"],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        holder.close()
    assert result.returncode != 0 and "the app process exited" in result.stderr
