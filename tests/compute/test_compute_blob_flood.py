"""A flooded worker keeps serving: the blob service caps connections per peer and in all, below the file limit,
and times out slow request heads and bodies, so that one peer holding connections neither keeps another from
being answered nor takes the descriptors the worker's own store needs. Loopback only: the flood comes from
127.0.0.2, the honest fetch from 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trolly.compute.blobs import BlobServer, BlobStore
from trolly.compute.blobs.connections import ConnectionLimits, admitted_total, peer_of

FLOODER = "127.0.0.2"
FLOOD_FILE_LIMIT = 256
"""The flooded server's soft file limit: low, so that a flood beyond it is cheap."""
FLOOD_CONNECTIONS = 400
"""More than the flooded server's file limit allows."""
FLOOD_SERVER = Path(__file__).resolve().parents[1] / "helpers" / "blob_flood_server.py"
"""The flooded blob service, a child process of its own (its file limit lowered)."""


def run(coroutine):
    return asyncio.run(coroutine)


async def connect_from(address: str, port: int):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1 << 16), within) == b""
    except (TimeoutError, ConnectionResetError):
        return False


async def held_for_a_while(reader: asyncio.StreamReader) -> bool:
    return not await closed_by_server(reader, 0.2)


def test_peers_are_counted_by_ipv4_address_and_ipv6_slash_64():
    assert peer_of("127.0.0.2") == "127.0.0.2"
    assert peer_of("::ffff:10.0.0.1") == "10.0.0.1"
    assert peer_of("2001:db8:1:2:aaaa::1") == peer_of("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert peer_of("2001:db8:1:3::1") != peer_of("2001:db8:1:2::1")


def test_the_total_stays_below_the_file_limit_with_descriptors_kept_for_the_store():
    limits = ConnectionLimits(total=1000, reserved_descriptors=100)
    assert admitted_total(limits, file_limit=100_000, already_open=20) == 1000
    assert admitted_total(limits, file_limit=256, already_open=20) == 136
    assert admitted_total(limits, file_limit=64, already_open=20) == 1


def test_connections_beyond_a_peer_s_cap_are_closed_at_once_and_another_peer_is_served(tmp_path):
    async def scenario():
        store = BlobStore(tmp_path / "store")
        digest = store.put(b"blob")
        async with BlobServer(store, limits=ConnectionLimits(per_peer=4, total=8)) as server:
            flood = [await connect_from(FLOODER, server.port) for _ in range(10)]
            held = [await held_for_a_while(reader) for reader, _ in flood]
            assert held.count(True) == 4 and server.guard.held == 4
            reader, writer = await connect_from("127.0.0.1", server.port)
            writer.write(f"GET /blobs/{digest} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"blob")
            for _, flood_writer in flood:
                flood_writer.close()
    run(scenario())


def test_a_peer_never_holds_more_than_half_of_the_total(tmp_path):
    async def scenario():
        async with BlobServer(BlobStore(tmp_path / "store"), limits=ConnectionLimits(per_peer=100, total=6)) as server:
            assert server.guard.per_peer == 3
            flood = [await connect_from(FLOODER, server.port) for _ in range(6)]
            assert [await held_for_a_while(reader) for reader, _ in flood].count(True) == 3
            for _, writer in flood:
                writer.close()
    run(scenario())


@pytest.mark.parametrize("sent", [b"", b"GET /health HTTP/1.1\r\nHost: x\r\n"])
def test_a_request_head_not_complete_within_the_header_timeout_is_closed(tmp_path, sent):
    async def scenario():
        limits = ConnectionLimits(header_timeout=0.3)
        async with BlobServer(BlobStore(tmp_path / "store"), limits=limits) as server:
            reader, writer = await connect_from(FLOODER, server.port)
            writer.write(sent)
            started = time.monotonic()
            assert await closed_by_server(reader, 5)
            assert time.monotonic() - started < 3
            assert server.guard.held == 0
    run(scenario())


def test_a_connection_idle_after_a_response_is_closed_after_the_header_timeout(tmp_path):
    async def scenario():
        async with BlobServer(BlobStore(tmp_path / "store"), limits=ConnectionLimits(header_timeout=0.3)) as server:
            reader, writer = await connect_from(FLOODER, server.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await reader.readexactly(len(b'{"ok": true}'))
            writer.write(b"GET /health HTTP/1.1\r\n")  # the next request's head, never finished
            assert await closed_by_server(reader, 5)
    run(scenario())


def test_an_upload_body_slower_than_the_body_timeout_is_cut_off_with_408(tmp_path):
    async def scenario():
        limits = ConnectionLimits(body_timeout=0.3)
        async with BlobServer(BlobStore(tmp_path / "store"), owner_token="t", limits=limits) as server:
            reader, writer = await connect_from("127.0.0.1", server.port)
            writer.write(b"POST /blobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nContent-Length: 1000\r\n\r\n"
                         + b"x" * 10)
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert answer.startswith(b"HTTP/1.1 408") and b"Connection: close" in answer
            assert not list((tmp_path / "store" / "blobs").iterdir())
            writer.close()  # else the server reads what is left of the body (aiohttp's lingering close)...
            await writer.wait_closed()
            await asyncio.sleep(0.1)  # ...and stopping waits for it
    run(scenario())


def open_flood(port: int, count: int) -> list[socket.socket]:
    """`count` connections from the flooder, started without waiting (the server may never accept them)."""
    sockets = []
    for _ in range(count):
        flood = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        flood.bind((FLOODER, 0))
        flood.setblocking(False)
        flood.connect_ex(("127.0.0.1", port))
        sockets.append(flood)
    return sockets


def fetch(port: int, digest: str) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", f"/blobs/{digest}")
        response = connection.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        connection.close()


def test_a_flood_beyond_the_file_limit_from_one_peer_neither_stops_another_nor_the_worker_s_own_writes(tmp_path):
    child = subprocess.Popen([sys.executable, str(FLOOD_SERVER),
                              str(tmp_path / "store"), str(FLOOD_FILE_LIMIT)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    flood: list[socket.socket] = []
    try:
        started = json.loads(child.stdout.readline())
        assert started["total"] < FLOOD_FILE_LIMIT
        flood = open_flood(started["port"], FLOOD_CONNECTIONS)
        time.sleep(0.5)  # the server works through the flood

        began = time.monotonic()
        assert fetch(started["port"], started["digest"]) == b"served while flooded"
        assert time.monotonic() - began < 5

        child.stdin.write("put\n")
        child.stdin.flush()
        answer = child.stdout.readline()
        assert answer.startswith("ok "), answer
        held = int(answer.split("held=")[1].split()[0])
        assert held <= started["per_peer"] + 1  # the flooder's, and at most the fetch's
    finally:
        for flood_socket in flood:
            flood_socket.close()
        if child.poll() is None:
            child.stdin.write("quit\n")
            child.stdin.close()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
