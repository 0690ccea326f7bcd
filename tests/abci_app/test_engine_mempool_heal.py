"""The solo engine's mempool connection heals: when the app answers a CheckTx with an exception or drops the
mempool connection, the engine re-opens that connection at once, re-checks the transactions waiting in its
mempool (dropping those that now fail) and keeps accepting new ones, without a handshake, a replayed block or
waiting for the next block.

Real processes over a real unix socket: the app is `tests/helpers/raising_app.py` (the real application, raising on
marker transactions), the engine is `trolly-node engine` with a long block time, so that the only way a
transaction gets back in is the heal itself. Unit-level fakes cover the pieces (the client's outcome per
request, the mempool's re-check, the server's mempool-connection switch).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import pathlib
import subprocess
import sys

import pytest
from dev_node import stop_process
from engine_helpers import rpc_post, send_tx, wait_until
from net_helpers import free_port
from raising_app import DROP_THE_CONNECTION, RAISE_IN_CHECK_TX, RAISE_ON_RECHECK_AMOUNT

from trolly.abci_app import home as homelib
from trolly.abci_app.engine import AppConnectionLost
from trolly.abci_app.engine.abci_client import AppProtocolError
from trolly.abci_app.engine.mempool import Mempool
from trolly.abci_app.proto.tendermint.abci import types_pb2
from trolly.chain.hd import dev_key

DEV = dev_key(0)
CHAIN_ID = "heal-test"
TO = hashlib.sha256(b"heal-recipient").digest()[:20]
FEE = 1_000_000
"""Well above any minimum fee the dev genesis asks for a small send."""
HELPERS = pathlib.Path(__file__).resolve().parents[1] / "helpers"


class Node:
    """`tests/helpers/raising_app.py` and `trolly-node engine` on one home; blocks every 60 s (only the first is
    made)."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        homelib.init_home(root, CHAIN_ID, dev=True)
        socket_address = f"unix://{root}/app.sock"
        self.url = f"http://127.0.0.1:{free_port()}"
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")]))
        self.app = self._spawn([sys.executable, str(HELPERS / "raising_app.py"), "--home", str(root),
                                "--abci", socket_address], "app.log", environment)
        self.engine = self._spawn(
            [sys.executable, "-m", "trolly.abci_app.cli", "engine", "--home", str(root), "--proxy-app", socket_address,
             "--rpc-laddr", self.url.replace("http://", "tcp://"), "--block-time", "60s"],
            "engine.log", environment,
        )

    def _spawn(self, argv: list[str], log_name: str, environment: dict) -> subprocess.Popen:
        return subprocess.Popen(argv, stdout=open(self.root / log_name, "ab"), stderr=subprocess.STDOUT, env=environment)

    def stop(self) -> None:
        for process in (self.engine, self.app):
            stop_process(process, 10)

    def log(self, name: str) -> str:
        return (self.root / name).read_text(errors="replace")

    def call(self, method: str, params=None) -> dict | None:
        try:
            return rpc_post(self.url, method, params)
        except OSError:
            return None

    def broadcast(self, tx: bytes) -> dict:
        return self.call("broadcast_tx_sync", {"tx": base64.b64encode(tx).decode()})

    def height(self) -> int:
        answer = self.call("status")
        return int(answer["result"]["sync_info"]["latest_block_height"]) if answer and "result" in answer else -1

    def waiting(self) -> list[bytes]:
        return [base64.b64decode(tx) for tx in self.call("unconfirmed_txs", {"limit": "100"})["result"]["txs"]]


@pytest.fixture
def node(tmp_path):
    running = Node(tmp_path / "home")
    try:
        wait_until(lambda: running.height() >= 1, 60, what="the first block")
        yield running
    except AssertionError:
        print(running.log("app.log")[-4000:], running.log("engine.log")[-4000:])
        raise
    finally:
        running.stop()


def send(nonce: int, amount: int) -> bytes:
    return send_tx(DEV, CHAIN_ID, nonce, TO, amount, fee=FEE)


def accepted(answer: dict | None) -> bool:
    return bool(answer) and "result" in answer and answer["result"]["code"] == 0


@pytest.mark.slow
def test_after_an_exception_on_check_tx_the_engine_rechecks_its_mempool_and_accepts_txs_again(node):
    first, marked, third = send(0, 1), send(1, RAISE_ON_RECHECK_AMOUNT), send(2, 2)
    for tx in (first, marked, third):
        assert accepted(node.broadcast(tx)), "a valid send was refused before the test began"
    height = node.height()

    answer = node.broadcast(RAISE_IN_CHECK_TX)
    assert "error" in answer and "exception" in answer["error"]["data"], answer

    # The re-check on the new connection: the marked send makes the app raise (dropped), and the send after
    # it now has a nonce gap (dropped); the first stays.
    wait_until(lambda: node.waiting() == [first], 10, what="the re-check after the heal")
    follow_up = send(1, 3)
    assert accepted(node.broadcast(follow_up)), "the engine still refuses transactions after the exception"
    assert node.waiting() == [first, follow_up]
    assert node.height() == height, "the heal must not need a block"
    assert "lost the app" not in node.log("engine.log"), "the heal must not tear down every connection"


@pytest.mark.slow
def test_a_dropped_mempool_connection_is_reopened_and_the_waiting_txs_survive_the_recheck(node):
    first = send(0, 1)
    assert accepted(node.broadcast(first))

    answer = node.broadcast(DROP_THE_CONNECTION)
    assert "error" in answer, answer
    second = send(1, 2)
    wait_until(lambda: accepted(node.broadcast(second)), 10, what="a send accepted after the drop")
    # The app forgot the old connection's mempool state, so the re-check admitted the first send again rather
    # than refusing it as a replay of its own nonce, and the second follows it.
    assert node.waiting() == [first, second]
    assert "lost the app" not in node.log("engine.log")


# ------------------------------------------------------------------------------------ unit-level fakes


class ScriptedOutcomes:
    """A `recheck_txs` stand-in: answers each tx from a script of outcomes, recording what it was asked."""

    def __init__(self, *rounds: dict) -> None:
        self.rounds = list(rounds)
        self.asked: list[list[bytes]] = []

    async def __call__(self, txs: list[bytes]) -> list:
        self.asked.append(list(txs))
        script = self.rounds.pop(0)
        return [script.get(tx, types_pb2.ResponseCheckTx(code=0)) for tx in txs]


def test_recheck_drops_a_tx_the_app_raised_on_and_stops_at_the_first_unanswered_one():
    async def scenario():
        mempool = Mempool()
        for tx in (b"a", b"b", b"c", b"d"):
            await mempool.check_and_add(tx, _answer_ok)
        lost = AppConnectionLost("mempool connection closed after a protocol error")
        outcomes = ScriptedOutcomes(
            {b"a": types_pb2.ResponseCheckTx(code=3), b"b": AppProtocolError("raised"), b"c": lost, b"d": lost},
        )
        with pytest.raises(AppConnectionLost):
            await mempool.recheck(outcomes)
        # a failed, b raised: both gone; c and d were never answered: they stay for the next re-check.
        assert mempool.txs() == [b"c", b"d"] and mempool.total_bytes == 2
        assert await mempool.recheck(ScriptedOutcomes({})) == 0
        assert mempool.txs() == [b"c", b"d"]

    asyncio.run(scenario())


def test_check_and_add_heals_the_connection_before_sending():
    async def scenario():
        mempool, order = Mempool(), []

        async def reconnect():
            order.append("reconnect")

        def send_check(tx, on_response):
            order.append(tx)
            return _answer_ok(tx, on_response)

        await mempool.check_and_add(b"a", send_check, reconnect=reconnect)
        assert order == ["reconnect", b"a"] and mempool.txs() == [b"a"]

    asyncio.run(scenario())


def _answer_ok(tx: bytes, on_response) -> asyncio.Future:
    response = types_pb2.ResponseCheckTx(code=0)
    on_response(response)
    future = asyncio.get_running_loop().create_future()
    future.set_result(response)
    return future
