"""What a stranger can send the solo engine's RPC: integers no handler can take are invalid params (-32602) with
no traceback in the log, over GET, POST and the websocket, whose connection stays open; and a web page in the
user's browser (a request with an `Origin` not in `cors_allowed_origins`) cannot POST to the node or open its
websocket."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request

import aiohttp
import pytest

from engine_helpers import InProcessChain, rpc_get, rpc_post, rpc_post_raw
from trolly.abci_app.engine.rpc_methods import METHODS
from trolly.abci_app.engine.rpc_server import RpcServer

HOSTILE_INTEGERS = ["9" * 30, str(1 << 63), str(-(1 << 63) - 1), "\u00b2", "\u0661\u0662", "1e3", "0x10", " 1",
                    "1_000", "-", ""]
"""Integer parameters in forms CometBFT's int64 handlers refuse: too large, too small, non-ASCII digits,
exponents, hex, spaces, separators, no digits at all."""
INT_PARAMETERS = sorted((method, name) for method, entry in METHODS.items() for name, kind in entry.params
                        if kind == "int")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    with InProcessChain(tmp_path_factory.mktemp("rpc-hostile") / "home") as running:
        yield running
    assert running.error is None


def tracebacks(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("method, name", INT_PARAMETERS)
def test_a_hostile_integer_is_invalid_params_over_post_with_no_traceback(chain, caplog, method, name):
    caplog.set_level(logging.INFO)
    for value in HOSTILE_INTEGERS + [1 << 64, -(1 << 63) - 1, 10**30]:
        if value == "":  # an empty string is "not given" over GET, an error over POST
            continue
        answer = rpc_post(chain.url, method, {name: value})
        assert answer["error"]["code"] == -32602, (method, name, value, answer)
    assert tracebacks(caplog) == []


@pytest.mark.parametrize("method, name", INT_PARAMETERS)
def test_a_hostile_integer_is_invalid_params_over_get_with_no_traceback(chain, caplog, method, name):
    caplog.set_level(logging.INFO)
    for value in HOSTILE_INTEGERS[:-1]:
        for written in (value, f'"{value}"'):
            status, answer = rpc_get(chain.url, method, **{name: written})
            assert status == 500 and answer["error"]["code"] == -32602, (method, name, written, answer)
    assert tracebacks(caplog) == []


def test_the_int64_bounds_themselves_reach_the_handler(chain):
    for value in (str((1 << 63) - 1), str(-(1 << 63))):
        answer = rpc_post(chain.url, "block", {"height": value})
        assert answer["error"]["code"] == -32603 and "height" in answer["error"]["data"]  # the handler's own words


def test_an_integer_literal_longer_than_the_interpreters_digit_limit_is_invalid_params(chain, caplog):
    caplog.set_level(logging.INFO)
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "block", "params": {"height": ' + b"7" * 5000 + b"}}"
    assert rpc_post_raw(chain.url, body)["error"]["code"] == -32602
    assert rpc_post_raw(chain.url, b"[" * 100_000 + b"]" * 100_000)["error"]["code"] == -32700
    assert tracebacks(caplog) == []


def test_a_websocket_answers_hostile_integers_and_stays_open(chain, caplog):
    caplog.set_level(logging.INFO)

    async def scenario() -> list[dict]:
        answers = []
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(chain.url + "/websocket") as socket:
                for request in (
                        {"jsonrpc": "2.0", "id": 1, "method": "subscribe",
                         "params": {"query": "tm.event='Tx' AND tx.height=" + "9" * 5000}},
                        {"jsonrpc": "2.0", "id": 2, "method": "subscribe",
                         "params": {"query": "tm.event='Tx' AND tx.height>\u0661"}},
                        {"jsonrpc": "2.0", "id": 3, "method": "block", "params": {"height": "9" * 5000}}):
                    await socket.send_json(request)
                    answers.append(await socket.receive_json(timeout=10))
                await socket.send_str('{"jsonrpc": "2.0", "id": 4, "method": "block", "params": {"height": '
                                      + "7" * 5000 + "}}")
                answers.append(await socket.receive_json(timeout=10))
                await socket.send_str("[" * 100_000 + "]" * 100_000)
                answers.append(await socket.receive_json(timeout=10))
                await socket.send_json({"jsonrpc": "2.0", "id": 6, "method": "health", "params": {}})
                answers.append(await socket.receive_json(timeout=10))
        return answers

    first, second, block, literal, deep, health = asyncio.run(scenario())
    assert first["id"] == 1 and "not a 64-bit integer" in first["error"]["data"]
    assert second["id"] == 2 and "parse" in second["error"]["data"]
    assert block["error"]["code"] == literal["error"]["code"] == -32602
    assert deep["error"]["code"] == -32700
    assert health == {"jsonrpc": "2.0", "id": 6, "result": {}}
    assert tracebacks(caplog) == []


# -- Origin ----------------------------------------------------------------------------------------------------------
def post_with_origin(url: str, origin: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "text/plain"} | ({"Origin": origin} if origin is not None else {})
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "health", "params": {}}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def websocket_status(url: str, origin: str | None) -> int:
    """101 when the websocket opened (and answered a call), else the HTTP status it was refused with."""
    headers = {"Origin": origin} if origin is not None else {}
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url + "/websocket", headers=headers) as socket:
                await socket.send_json({"jsonrpc": "2.0", "id": 1, "method": "health", "params": {}})
                assert (await socket.receive_json(timeout=10))["result"] == {}
                return 101
        except aiohttp.WSServerHandshakeError as error:
            return error.status


def test_by_default_a_web_page_can_neither_post_to_the_node_nor_open_its_websocket(chain):
    for origin in ("https://evil.example", "null", "http://127.0.0.1:26657"):
        status, answer = post_with_origin(chain.url, origin)
        assert status == 403 and "cors_allowed_origins" in answer["error"]["data"]
        assert asyncio.run(websocket_status(chain.url, origin)) == 403
    assert post_with_origin(chain.url, None) == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})
    assert asyncio.run(websocket_status(chain.url, None)) == 101
    assert rpc_get(chain.url, "health") == (200, {"jsonrpc": "2.0", "id": -1, "result": {}})


def test_a_site_in_cors_allowed_origins_may_post_and_open_the_websocket_and_no_other():
    allowed = "https://wallet.example"

    async def scenario() -> tuple:
        server = RpcServer(node=None, laddr="tcp://127.0.0.1:0", broadcast_tx_commit_timeout=1.0,
                           cors_origins=(allowed,))
        await server.start()
        try:
            loop = asyncio.get_running_loop()
            posts = [await loop.run_in_executor(None, post_with_origin, server.url, origin)
                     for origin in (allowed, "https://evil.example")]
            sockets = [await websocket_status(server.url, origin) for origin in (allowed, "https://evil.example")]
            return posts, sockets
        finally:
            await server.stop()

    (allowed_post, foreign_post), sockets = asyncio.run(scenario())
    assert allowed_post == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})
    assert foreign_post[0] == 403
    assert sockets == [101, 403]
