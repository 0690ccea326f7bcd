"""Limits on the solo engine's JSON-RPC and websocket surface, each against a real server over real sockets
and each answered as CometBFT v0.38 answers it: open connections, slow headers and bodies (slowloris), idle
connections, body and websocket message sizes, batch size, subscriptions per client and in clients (an
in-flight `broadcast_tx_commit` counts), and searches bounded by pages and time without stalling blocks.

Limits are set small (and timeouts short) through `RpcLimits` so that each test is quick.
"""

from __future__ import annotations

import asyncio
import base64
import json
import select
import socket
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from engine_helpers import InProcessChain, rpc_post, send_tx, wait_until

from trolly.abci_app.engine import rpc_methods
from trolly.abci_app.engine.rpc_common import RpcError, page_window
from trolly.abci_app.engine.rpc_server import RpcLimits
from trolly.abci_app.engine.event_bus import EventBus, SubscriptionLimit
from trolly.abci_app.engine.event_query import parse_query
from trolly.chain.hd import dev_key

DEV = dev_key(0)
FEE = 1_000_000
"""Well above any minimum fee the dev genesis asks for a small send."""


def chain(tmp_path, block_interval: float = 0.05, search_timeout: float = 10.0, **limits) -> InProcessChain:
    return InProcessChain(tmp_path / "home", block_interval=block_interval, rpc_limits=RpcLimits(**limits),
                          search_timeout=search_timeout)


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def closed_within(connection: socket.socket, seconds: float, trickle: bytes | None = None) -> float | None:
    """Seconds until the server closes `connection` (sending `trickle` every 0.1 s meanwhile), or None."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        readable, _, _ = select.select([connection], [], [], 0.1)
        if readable:
            try:
                if connection.recv(65536) == b"":
                    return time.monotonic() - start
            except ConnectionResetError:
                return time.monotonic() - start
            continue
        if trickle:
            try:
                connection.sendall(trickle)
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
    return None


def post_json(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


# ------------------------------------------------------------------------------------------ connections


def test_connections_beyond_max_open_connections_wait_until_one_closes(tmp_path):
    with chain(tmp_path, max_open_connections=2, read_timeout=5.0) as running:
        address = host_port(running.url)
        holders = [socket.create_connection(address) for _ in range(2)]
        wait_until(lambda: running.node.rpc.open_connections == 2, 5, what="two open connections")
        waiting = socket.create_connection(address)  # queued by the kernel, not accepted
        waiting.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        waiting.settimeout(0.5)
        with pytest.raises(socket.timeout):
            waiting.recv(1)
        assert running.node.rpc.open_connections == 2
        holders[0].close()
        waiting.settimeout(5)
        assert waiting.recv(65536).startswith(b"HTTP/1.1 200")
        for connection in (holders[1], waiting):
            connection.close()


def test_a_client_trickling_its_headers_is_cut_off_after_the_read_timeout(tmp_path):
    with chain(tmp_path, read_timeout=0.5) as running:
        connection = socket.create_connection(host_port(running.url))
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n")
        elapsed = closed_within(connection, 5.0, trickle=b"X")  # one header byte every 0.1 s, never finished
        connection.close()
        assert elapsed is not None, "the slowloris connection was never cut off"
        assert 0.3 < elapsed < 2.0


def test_a_client_trickling_its_body_gets_cometbft_s_read_error_and_is_cut_off(tmp_path):
    with chain(tmp_path, read_timeout=0.5) as running:
        connection = socket.create_connection(host_port(running.url))
        connection.sendall(b"POST / HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 1000\r\n\r\n{\"jsonrpc\"")
        start = time.monotonic()
        received = b""
        connection.settimeout(0.1)
        while time.monotonic() - start < 5.0:
            try:
                chunk = connection.recv(65536)
            except socket.timeout:
                connection.sendall(b" ")
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        elapsed = time.monotonic() - start
        connection.close()
        assert elapsed < 2.0, "the slow body was never cut off"
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400")
        answer = json.loads(body)
        assert answer["error"]["code"] == -32600 and answer["error"]["message"] == "Invalid Request"
        assert answer["error"]["data"] == "error reading request body: i/o timeout"


def test_an_idle_keep_alive_connection_is_closed_after_the_read_timeout(tmp_path):
    with chain(tmp_path, read_timeout=0.5) as running:
        connection = socket.create_connection(host_port(running.url))
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        connection.settimeout(5)
        assert connection.recv(65536).startswith(b"HTTP/1.1 200")
        elapsed = closed_within(connection, 5.0)
        connection.close()
        assert elapsed is not None and elapsed < 2.0
        wait_until(lambda: running.node.rpc.open_connections == 0, 5, what="the connection's slot back")


# ------------------------------------------------------------------------------------------------ sizes


def test_a_body_over_max_body_bytes_is_refused_as_cometbft_refuses_it(tmp_path):
    with chain(tmp_path, max_body_bytes=1000) as running:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "health", "params": {"pad": "x" * 2000}}).encode()
        status, answer = post_json(running.url, body)
        assert status == 400
        assert answer["error"] == {"code": -32600, "message": "Invalid Request",
                                   "data": "error reading request body: http: request body too large"}
        assert post_json(running.url, b'{"jsonrpc":"2.0","id":1,"method":"health"}') == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})


def test_a_batch_over_max_request_batch_size_is_refused(tmp_path):
    with chain(tmp_path, max_request_batch_size=2) as running:
        batch = [{"jsonrpc": "2.0", "id": i, "method": "health"} for i in range(3)]
        status, answer = post_json(running.url, json.dumps(batch).encode())
        assert status == 400
        assert answer["error"]["code"] == -32600
        assert answer["error"]["data"] == "maximum JSON-RPC batch size exceeded, got: 3, max: 2"
        status, answers = post_json(running.url, json.dumps(batch[:2]).encode())
        assert status == 200 and [a["id"] for a in answers] == [0, 1]


def test_a_websocket_message_over_max_body_bytes_closes_the_websocket(tmp_path):
    async def scenario(url):
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{url}/websocket") as websocket:
                await websocket.send_str(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "health", "pad": "x" * 2000}))
                message = await asyncio.wait_for(websocket.receive(), 10)
                assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
                assert websocket.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
            async with session.ws_connect(f"{url}/websocket") as websocket:  # a message within the limit is served
                await websocket.send_str(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "health"}))
                assert json.loads((await asyncio.wait_for(websocket.receive(), 10)).data)["result"] == {}

    with chain(tmp_path, max_body_bytes=1000) as running:
        asyncio.run(scenario(running.url))


# ---------------------------------------------------------------------------------------- subscriptions


async def _subscribe(websocket, query: str, request_id: int) -> dict:
    await websocket.send_str(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "subscribe", "params": {"query": query}}))
    while True:
        answer = json.loads((await asyncio.wait_for(websocket.receive(), 10)).data)
        if answer.get("id") == request_id and "data" not in answer.get("result", {}):
            return answer


QUERIES = ["tm.event = 'NewBlock'", "tm.event = 'Tx'", "tm.event = 'NewBlockHeader'", "tm.event = 'NewBlockEvents'"]


def test_subscriptions_per_client_are_capped(tmp_path):
    async def scenario(url):
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{url}/websocket") as websocket:
                for i in range(2):
                    assert (await _subscribe(websocket, QUERIES[i], i))["result"] == {}
                refused = await _subscribe(websocket, QUERIES[2], 9)
                assert refused["error"] == {"code": -32603, "message": "Internal error",
                                            "data": "max_subscriptions_per_client 2 reached"}

    with chain(tmp_path, block_interval=1.0, max_subscriptions_per_client=2) as running:
        asyncio.run(scenario(running.url))


def test_subscription_clients_are_capped_and_a_slot_frees_when_a_client_leaves(tmp_path):
    async def scenario(url, node):
        async with aiohttp.ClientSession() as session:
            first = await session.ws_connect(f"{url}/websocket")
            assert (await _subscribe(first, QUERIES[0], 1))["result"] == {}
            async with session.ws_connect(f"{url}/websocket") as second:
                refused = await _subscribe(second, QUERIES[0], 2)
                assert refused["error"]["data"] == "max_subscription_clients 1 reached"
                await first.close()
                for _ in range(100):
                    if node.events.client_count == 0:
                        break
                    await asyncio.sleep(0.05)
                assert (await _subscribe(second, QUERIES[0], 3))["result"] == {}

    with chain(tmp_path, block_interval=1.0, max_subscription_clients=1) as running:
        asyncio.run(scenario(running.url, running.node))


def test_broadcast_tx_commit_counts_against_the_subscription_limits(tmp_path):
    async def scenario(url):
        tx = base64.b64encode(send_tx(DEV, "engine-test", 0, b"\x05" * 20, 7, fee=FEE)).decode()
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{url}/websocket") as websocket:
                assert (await _subscribe(websocket, QUERIES[0], 1))["result"] == {}
                # The same client (this websocket) holds its one subscription: no room for a broadcast_tx_commit.
                await websocket.send_str(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "broadcast_tx_commit",
                                                     "params": {"tx": tx}}))
                while True:
                    answer = json.loads((await asyncio.wait_for(websocket.receive(), 10)).data)
                    if answer.get("id") == 2:
                        break
                assert answer["error"]["data"] == "max_subscriptions_per_client 1 reached"
                # Another client over HTTP: the one subscription client slot is taken.
                async with session.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "broadcast_tx_commit",
                                                   "params": {"tx": tx}}) as response:
                    answer = await response.json()
                assert answer["error"] == {"code": -32603, "message": "Internal error",
                                           "data": "max_subscription_clients 1 reached"}

    with chain(tmp_path, max_subscription_clients=1, max_subscriptions_per_client=1) as running:
        asyncio.run(scenario(running.url))


def test_an_in_flight_broadcast_tx_commit_holds_a_subscription_until_it_returns(tmp_path):
    with chain(tmp_path, block_interval=3.0, max_subscription_clients=1) as running:
        tx = base64.b64encode(send_tx(DEV, "engine-test", 0, b"\x05" * 20, 7, fee=FEE)).decode()
        outcome = {}
        sender = threading.Thread(target=lambda: outcome.update(rpc_post(running.url, "broadcast_tx_commit", {"tx": tx})))
        running.wait_for_height(running.height() + 1)  # a block just made: the next is 3 s away
        sender.start()
        wait_until(lambda: running.node.events.client_count == 1, 2, what="the broadcast's subscription")

        async def subscribe_once() -> dict:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(f"{running.url}/websocket") as websocket:
                    return await _subscribe(websocket, QUERIES[0], 1)

        answer = asyncio.run(subscribe_once())
        assert sender.is_alive(), "the broadcast returned before its block could be made"
        assert answer["error"]["data"] == "max_subscription_clients 1 reached"
        sender.join(30)
        assert outcome["result"]["tx_result"]["code"] == 0, outcome
        assert running.node.events.client_count == 0
        assert asyncio.run(subscribe_once())["result"] == {}


def test_event_bus_limits_count_clients_and_their_subscriptions():
    bus = EventBus(max_clients=2, max_per_client=2)
    query = parse_query("tm.event = 'NewBlock'")
    a1, a2 = bus.subscribe(query, "a:1"), bus.subscribe(query, "a:1")
    with pytest.raises(SubscriptionLimit, match="max_subscriptions_per_client 2 reached"):
        bus.subscribe(query, "a:1")
    bus.subscribe(query, "b:2")
    with pytest.raises(SubscriptionLimit, match="max_subscription_clients 2 reached"):
        bus.subscribe(query, "c:3")
    bus.unsubscribe(a1)
    bus.unsubscribe(a1)  # twice is harmless
    assert bus.client_count == 2
    bus.unsubscribe(a2)
    assert bus.client_count == 1
    bus.subscribe(query, "c:3")


def test_rpc_limits_come_from_config_toml_with_cometbft_defaults():
    assert RpcLimits.from_config({}) == RpcLimits()
    assert RpcLimits().max_open_connections == 900 and RpcLimits().max_body_bytes == 1_000_000
    assert RpcLimits().max_subscription_clients == 100 and RpcLimits().max_subscriptions_per_client == 5
    limits = RpcLimits.from_config({"max_open_connections": 3, "max_body_bytes": 10, "max_subscription_clients": 4})
    assert (limits.max_open_connections, limits.max_body_bytes, limits.max_subscription_clients) == (3, 10, 4)
    from trolly.abci_app.engine import EngineError

    for bad in ({"max_open_connections": -1}, {"max_body_bytes": "1MB"}, {"max_body_bytes": 0}, {"max_subscription_clients": True}):
        with pytest.raises(EngineError):
            RpcLimits.from_config(bad)


# ------------------------------------------------------------------------------------------- searches


def test_pages_follow_cometbft():
    assert page_window(None, None, 500) == (0, 30)
    assert page_window(2, 1000, 500) == (100, 100)  # per_page above 100 is 100
    assert page_window(1, 0, 5) == (0, 30) and page_window(1, -4, 5) == (0, 30)
    for page, total, pages in ((0, 10, 1), (2, 30, 1), (-1, 0, 1), (4, 250, 3)):
        with pytest.raises(RpcError, match=rf"page should be within \[1, {pages}\] range, given {page}"):
            page_window(page, None if total != 250 else 100, total)


def test_block_search_pages_are_capped_at_100_and_checked(tmp_path):
    with chain(tmp_path, block_interval=0.005) as running:
        running.wait_for_height(105, timeout=60)
        answer = rpc_post(running.url, "block_search", {"query": "block.height > 0", "per_page": "500"})["result"]
        assert len(answer["blocks"]) == 100 and int(answer["total_count"]) >= 105
        refused = rpc_post(running.url, "block_search", {"query": "block.height > 0", "page": "99", "per_page": "100"})
        assert refused["error"]["code"] == -32603
        assert refused["error"]["data"].startswith("page should be within [1, ")


def test_a_search_that_scans_too_long_stops_with_an_error_and_never_stalls_blocks(tmp_path, monkeypatch):
    slow_map = rpc_methods.block_event_map

    def slow_block_event_map(response):
        time.sleep(0.05)  # each block the search reads costs time: a long chain in miniature
        return slow_map(response)

    monkeypatch.setattr(rpc_methods, "block_event_map", slow_block_event_map)
    with chain(tmp_path, block_interval=0.01, search_timeout=0.5) as running:
        running.wait_for_height(60, timeout=60)
        outcome = {}
        searcher = threading.Thread(target=lambda: outcome.update(
            rpc_post(running.url, "block_search", {"query": "block.height > 0"})))
        height_before = running.height()
        started = time.monotonic()
        searcher.start()
        slowest_health = 0.0
        while searcher.is_alive():
            asked = time.monotonic()
            assert rpc_post(running.url, "health") == {"jsonrpc": "2.0", "id": 1, "result": {}}
            slowest_health = max(slowest_health, time.monotonic() - asked)
            time.sleep(0.02)
        searcher.join()
        elapsed = time.monotonic() - started
        assert outcome["error"]["code"] == -32603 and "search timed out" in outcome["error"]["data"], outcome
        assert elapsed < 2.5, "the search ran well past its time budget"
        assert slowest_health < 1.0, "the search held up the event loop"
        assert running.height() > height_before, "no block was made while the search ran"
