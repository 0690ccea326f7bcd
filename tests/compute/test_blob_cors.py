"""CORS on the blob services a browser worker's tab talks to from another origin (compute/blobs/cors.py).

A tab reads blobs, listings and the dataset from blob services and relays, and pushes its own blobs to its relay
with signed PUTs. Each answer a page must read says `Access-Control-Allow-Origin`; a relay answers the preflight
of a signed push; what a page must never send (a blob service's owner writes) gets no preflight answer, so the
browser sends nothing."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from aiohttp.test_utils import TestClient, TestServer
from market_helpers import MARKET_PARAMS, Market
from relay_helpers import put, run_relay

from trolly.chain.crypto import encode_address
from trolly.compute.blobs import BlobStore
from trolly.compute.blobs.relay_auth import SIGNED_HEADERS
from trolly.compute.blobs.server import build_app

PAGE = "http://127.0.0.1:26748"
"""The origin of a console serving the worker page (any origin is answered alike)."""


def preflight(method: str, headers: str = "") -> dict:
    asked = {"Origin": PAGE, "Access-Control-Request-Method": method}
    if headers:
        asked["Access-Control-Request-Headers"] = headers
    return asked


@pytest.fixture
def market(make_chain):
    market = Market(make_chain(accounts=5, validators=1, params={"market": MARKET_PARAMS}))
    market.task_id = market.open_task(workers=2)
    return market


def serve_blobs(tmp_path, test) -> None:
    store = BlobStore(tmp_path / "blobs")
    digest = store.put(b"a shard of the dataset")

    async def run():
        async with TestClient(TestServer(build_app(store, owner_token="secret"))) as client:
            await test(client, digest)

    asyncio.run(run())


def test_a_blob_service_lets_any_page_read_its_blobs_and_listings(tmp_path):
    async def test(client, digest):
        response = await client.get(f"/blobs/{digest}", headers={"Origin": PAGE})
        assert response.status == 200 and response.headers["Access-Control-Allow-Origin"] == "*"
        assert "Access-Control-Allow-Credentials" not in response.headers
        missing = await client.get("/tasks/1/rounds/0/checkpoints", headers={"Origin": PAGE})
        assert missing.status == 404 and missing.headers["Access-Control-Allow-Origin"] == "*"  # the reason is read
        answer = await client.options(f"/blobs/{digest}", headers=preflight("GET"))
        assert answer.status == 204 and answer.headers["Access-Control-Allow-Origin"] == "*"

    serve_blobs(tmp_path, test)


def test_a_blob_service_answers_no_preflight_for_its_owner_writes(tmp_path):
    """Attack: a web page the owner visits tries to write blobs with the owner's token it guessed or stole;
    the browser must not even send it: the preflight is refused without CORS headers."""
    async def test(client, digest):
        for method in ("PUT", "POST"):
            answer = await client.options("/blobs", headers=preflight(method, "authorization"))
            assert answer.status == 403 and "Access-Control-Allow-Origin" not in answer.headers
            assert "Access-Control-Allow-Methods" not in answer.headers
        written = await client.put(f"/blobs/{digest}", data=b"x", headers={"Origin": PAGE,
                                                                            "Authorization": "Bearer secret"})
        assert "Access-Control-Allow-Origin" not in written.headers  # not readable from a page either

    serve_blobs(tmp_path, test)


def test_a_relay_answers_the_preflight_of_a_signed_push_and_its_refusals_are_readable(market, tmp_path):
    member, stranger = market.workers[0], market.workers[2]
    data = b"checkpoint" * 50
    digest = hashlib.sha256(data).hexdigest()
    path = f"/workers/{encode_address(member.address)}/blobs/{digest}"

    async def test(client, relay):
        answer = await client.options(path, headers=preflight("PUT", ", ".join(SIGNED_HEADERS).lower()))
        assert answer.status == 204 and answer.headers["Access-Control-Allow-Origin"] == "*"
        assert answer.headers["Access-Control-Allow-Methods"] == "PUT"
        allowed = {name.strip().lower() for name in answer.headers["Access-Control-Allow-Headers"].split(",")}
        assert {name.lower() for name in SIGNED_HEADERS} | {"content-type"} <= allowed
        listing = f"/workers/{encode_address(member.address)}/tasks/{market.task_id}/rounds/0/checkpoints"
        assert (await client.options(listing, headers=preflight("PUT"))).status == 204
        assert (await client.options("/probe", headers=preflight("POST"))).status == 403  # not for pages
        status, _ = await put(client, stranger, market.task_id, data)
        assert status == 403
        refused = await client.put(path, data=data, headers={"Origin": PAGE})  # unsigned: 401, reason readable
        assert refused.status == 401 and refused.headers["Access-Control-Allow-Origin"] == "*"
        assert (await put(client, member, market.task_id, data))[0] == 201
        fetched = await client.get(path, headers={"Origin": PAGE})
        assert await fetched.read() == data and fetched.headers["Access-Control-Allow-Origin"] == "*"

    run_relay(market, tmp_path, test)
