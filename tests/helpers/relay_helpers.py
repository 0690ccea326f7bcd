"""A real relay over HTTP for the relay tests: its application on a test server, its members read from an
in-process chain (`chain_helpers.Chain`, through the same queries a node answers), and signed pushes to it."""

from __future__ import annotations

import asyncio
import hashlib
import time

from aiohttp.test_utils import TestClient, TestServer

from trolly.chain.crypto import encode_address
from trolly.compute.blobs.relay import Relay, RelayOptions, build_relay_app
from trolly.compute.blobs.relay_auth import relay_identity, sign_push
from trolly.compute.blobs.relay_members import ChainMembers
from trolly.compute.blobs.relay_store import RelayStore


class ChainQueries:
    """`query_json` over the in-process chain, as the relay's RPC client answers it from a node."""

    def __init__(self, chain) -> None:
        self.chain = chain
        self.asked = 0

    async def query_json(self, path: str, height: int = 0):
        self.asked += 1
        return self.chain.query(path)


def make_relay(market, root, ttl: float = 5.0, **store_options) -> Relay:
    return Relay(RelayStore(root, **store_options), ChainMembers(ChainQueries(market.chain), ttl),
                 RelayOptions(keep_settled=0.0))


def run_relay(market, tmp_path, test, ttl: float = 5.0, **store_options):
    """Run `test(client, relay)` against the relay's application on a test server (`ttl`: how long the relay
    keeps a task's members), the relay known by the test server's URL."""
    relay = make_relay(market, tmp_path / "relay", ttl, **store_options)
    asyncio.run(serve(relay, test))
    return relay


async def serve(relay: Relay, test) -> None:
    async with TestClient(TestServer(build_relay_app(relay))) as client:
        relay.known_as = (relay_identity(base_url(client)),)
        await test(client, relay)


def base_url(client) -> str:
    return str(client.make_url("")).rstrip("/")


def push_headers(client, key, task_id: int, digest: str, timestamp: int | None = None, round_index: int = 0,
                 resource: str = "blob") -> dict:
    return sign_push(key, base_url(client), task_id, round_index, resource, digest,
                     int(time.time()) if timestamp is None else timestamp)


async def put(client, key, task_id: int, data: bytes, digest: str | None = None, headers: dict | None = None,
              worker: str | None = None):
    digest = digest or hashlib.sha256(data).hexdigest()
    worker = worker or encode_address(key.address)
    headers = push_headers(client, key, task_id, digest) if headers is None else headers
    response = await client.put(f"/workers/{worker}/blobs/{digest}", data=data, headers=headers)
    return response.status, (await response.json())


async def put_listing(client, key, task_id: int, round_index: int, body: bytes, headers: dict | None = None):
    """(status, answer) of a signed PUT of `body` as `key`'s checkpoint listing of a round."""
    headers = headers or push_headers(client, key, task_id, hashlib.sha256(body).hexdigest(), None, round_index,
                                      "checkpoints")
    path = f"/workers/{encode_address(key.address)}/tasks/{task_id}/rounds/{round_index}/checkpoints"
    response = await client.put(path, data=body, headers=headers)
    return response.status, await response.json()
