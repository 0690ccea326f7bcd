"""The ABCI socket server in process: four connections, ordering, Flush, and bad frames closing one connection.

The server runs on its own event loop in a background thread; the tests talk to it with the independent
blocking client of `abci_wire_client` (its own protobuf encoder, no generated code).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading

import pytest
from abci_helpers import CHAIN_ID, FakeStore, genesis_bytes, key_for, send_tx

import abci_wire_client as wire
from trolly.abci_app.listen_address import AddressError, parse_address
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.server import AbciServer, serve

ALICE, BOB = key_for(1), key_for(2)
LIMIT = 4096


class RunningServer:
    """An AbciServer on a private event loop in a thread, stopped cleanly at the end."""

    def __init__(self, app, address: str, max_message_bytes: int = LIMIT) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = AbciServer(app, address, max_message_bytes=max_message_bytes)
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.server.start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10), "server did not start"
        self.address = self.server.bound_address

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def store():
    return FakeStore()


@pytest.fixture
def app(store):
    return TrollyApplication(store)


@pytest.fixture
def running(app):
    server = RunningServer(app, "tcp://127.0.0.1:0")
    yield server
    server.stop()


def start_chain(client: wire.CometLikeClient) -> None:
    client.init_chain(CHAIN_ID, genesis_bytes({ALICE: 10**6}), seconds=1_700_000_000)
    client.finalize_and_commit(1, [], seconds=1_700_000_001)


def test_four_connections_each_get_their_answers_in_order(running, store):
    client = wire.CometLikeClient(running.address)
    start_chain(client)
    errors: list[BaseException] = []

    def hammer(connection: wire.Connection, label: str, extra: bytes) -> None:
        try:
            for round_ in range(20):
                requests = [wire.echo(f"{label}-{round_}-{i}") for i in range(10)] + [extra]
                answers = connection.call(*requests)
                assert [a.text(1) for a in answers[:10]] == [f"{label}-{round_}-{i}" for i in range(10)]
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    extras = {"query": wire.query("/params"), "snapshot": wire.list_snapshots(),
              "mempool": wire.check_tx(send_tx(BOB, ALICE.address, 1, 0)), "consensus": wire.info()}
    threads = [threading.Thread(target=hammer, args=(getattr(client, name), name, extra))
               for name, extra in extras.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    assert store.last_height == 1
    client.close()


def test_flush_is_answered_after_every_earlier_response(running):
    connection = wire.Connection(running.address)
    # Pipeline 200 requests and a flush in a single write, before reading anything.
    connection.send(*[wire.echo(str(i)) for i in range(200)], wire.flush())
    for i in range(200):
        response = wire.decode(connection.receive())
        assert list(response.fields) == [wire.RES_ECHO] and response.message(wire.RES_ECHO).text(1) == str(i)
    assert list(wire.decode(connection.receive()).fields) == [wire.RES_FLUSH]
    connection.close()


BAD_INPUT = {
    "varint longer than 10 bytes": b"\x80" * 11,
    "varint beyond 64 bits": b"\xff" * 9 + b"\x7f",
    "oversize message": wire.varint(LIMIT + 1) + b"\x00" * 16,
    "oversize announced, no body": wire.varint(1 << 40),
    "undecodable request": wire.varint(3) + b"\xff\xff\xff",
    "empty request": wire.varint(0),
    "removed v0.34 method (BeginBlock = 7)": wire.varint(2) + b"\x3a\x00",
    "unknown field only": wire.varint(3) + b"\xf8\x07\x01",
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_frames_close_only_their_connection(running, store, case, caplog):
    caplog.set_level(logging.INFO, logger="trolly.abci")
    client = wire.CometLikeClient(running.address)
    start_chain(client)
    before = (dict(store.items), store.last_height, store.last_app_hash)
    victim = wire.Connection(running.address)
    victim.send(wire.echo("before"))  # a valid request first: it is answered, then the garbage closes the line
    victim.send_raw(BAD_INPUT[case])
    assert wire.decode(victim.receive()).message(wire.RES_ECHO).text(1) == "before"
    assert victim.closed_by_server()
    # Everyone else carries on, including new connections, and nothing changed.
    assert client.info().int(4) == 1
    assert client.check_tx(send_tx(ALICE, BOB.address, 1, 0)).code == 0
    fresh = wire.Connection(running.address)
    assert fresh.call(wire.echo("after"))[0].text(1) == "after"
    assert (dict(store.items), store.last_height, store.last_app_hash) == before
    assert "closing connection" in caplog.text
    fresh.close()
    victim.close()
    client.close()


def test_truncated_frame_then_hangup_is_logged_and_harmless(running, caplog):
    caplog.set_level(logging.INFO, logger="trolly.abci")
    victim = wire.Connection(running.address)
    victim.send_raw(wire.varint(100) + b"\x0a" * 10)
    victim.sock.shutdown(1)  # half-close: the server sees the end of stream mid-frame
    assert victim.closed_by_server()
    assert wire.Connection(running.address).call(wire.echo("still here"))[0].text(1) == "still here"
    assert "ended after 10 of 100 body bytes" in caplog.text


def test_a_bug_in_the_app_becomes_an_exception_response_with_a_traceback(running, app, caplog, monkeypatch):
    def broken(request):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(app, "query", broken)
    connection = wire.Connection(running.address)
    connection.send(wire.query("/params"), wire.echo("next"), wire.flush())
    first = wire.decode(connection.receive())
    assert list(first.fields) == [wire.RES_EXCEPTION]
    assert "ZeroDivisionError: simulated bug" in first.message(wire.RES_EXCEPTION).text(1)
    assert wire.decode(connection.receive()).message(wire.RES_ECHO).text(1) == "next"
    assert list(wire.decode(connection.receive()).fields) == [wire.RES_FLUSH]
    assert "Traceback" in caplog.text and "bug while handling query" in caplog.text
    connection.close()


def test_calls_out_of_order_get_an_exception_but_no_traceback(running, caplog):
    connection = wire.Connection(running.address)
    connection.send(wire.commit(), wire.flush())
    response = wire.decode(connection.receive())
    assert "Commit without a FinalizeBlock" in response.message(wire.RES_EXCEPTION).text(1)
    assert "Traceback" not in caplog.text
    connection.close()


def test_unix_socket_serves_and_is_removed_on_stop(app, tmp_path):
    path = tmp_path / "abci.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the socket file a killed run left behind: replaced, not an error
    server = RunningServer(app, f"unix://{path}")
    try:
        assert wire.Connection(f"unix://{path}").call(wire.echo("unix"))[0].text(1) == "unix"
    finally:
        server.stop()
    assert not os.path.exists(path)


def test_serve_runs_until_cancelled(app):
    async def scenario() -> str:
        ready = asyncio.Event()
        task = asyncio.create_task(serve(app, "tcp://127.0.0.1:0", ready=ready))
        await ready.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    assert asyncio.run(scenario()) == "cancelled"


def test_server_refuses_an_app_missing_abci_methods():
    with pytest.raises(TypeError, match="lacks the ABCI method"):
        AbciServer(object(), "tcp://127.0.0.1:0")


def test_parse_address():
    assert str(parse_address("tcp://127.0.0.1:26658")) == "tcp://127.0.0.1:26658"
    assert str(parse_address("127.0.0.1:1")) == "tcp://127.0.0.1:1"
    assert parse_address("unix:///tmp/x.sock").path == "/tmp/x.sock"
    for bad in ("tcp://nohost", "unix://", "tcp://:80", "tcp://h:99999", "tcp://h:port", "udp://127.0.0.1:1",
                "http://h:80"):
        with pytest.raises(AddressError):
            parse_address(bad)


def test_when_every_connection_closes_the_mempool_overlay_is_forgotten(running, store):
    """An engine that restarts lost its mempool: resubmitting the same tx must not look like a replay."""
    client = wire.CometLikeClient(running.address)
    start_chain(client)
    tx = send_tx(ALICE, BOB.address, 5, 0)
    assert client.check_tx(tx).code == 0
    assert client.check_tx(tx).code != 0  # same session: the overlay holds it
    client.close()
    for _ in range(100):  # the server notices the closes asynchronously
        if not running.server._connections:
            break
        threading.Event().wait(0.02)
    again = wire.CometLikeClient(running.address)
    assert again.info().int(4) == 1
    assert again.check_tx(tx).code == 0
    again.close()
