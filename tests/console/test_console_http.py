"""The console over HTTP (aiohttp's test client) against a real `trolly-node dev` holding a running task: the
pages' JSON, the page itself, live updates, the CSRF and Origin refusals, and a node that goes down."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from console_helpers import DEV_ADDRESS, busy_node, csrf_token, own_origin, with_console
from dev_node import dev_node
from trolly.console.chain_reads import RECENT_TXS
from trolly.console.server import CACHE, DIST
from trolly.console.security import CSRF_HEADER
from trolly.wallet.rpc import RpcClient


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with busy_node(tmp_path_factory.mktemp("console-http")) as busy:
        yield busy


def test_the_network_page_shows_height_validators_blocks_and_transactions(node):
    async def check(client):
        response = await client.get("/api/network")
        assert response.status == 200
        return await response.json()

    network = with_console(node.url, check)
    assert network["status"]["latest_block_height"] >= 1 and network["status"]["chain_id"]
    (validator,) = network["validators"]
    assert validator["power"] > 0 and validator["jailed"] is False and validator["moniker"]
    assert validator["proof"]["verified"] and validator["proof"]["note"].startswith("proved at height ")
    assert network["blocks"][0]["height"] == network["status"]["latest_block_height"]
    assert [b["height"] for b in network["blocks"]] == sorted((b["height"] for b in network["blocks"]), reverse=True)
    assert network["block_time_seconds"] is not None and network["block_time_seconds"] > 0
    assert network["txs"] and all(tx["height"] >= 1 for tx in network["txs"])


def test_the_network_page_lists_users_transactions_not_the_engines_seed_transactions(node):
    """Every block holds the engine's seed transaction: listing the newest transactions of any kind showed only
    those, and a user's transaction was gone from the page a few blocks after it was included."""
    with RpcClient(node.url) as rpc:  # more blocks, each with its seed transaction, than the page lists
        rpc.wait_for_height(rpc.status().latest_block_height + RECENT_TXS + 1, timeout=60)

    async def check(client):
        return await (await client.get("/api/network")).json()

    network = with_console(node.url, check)
    assert all(tx["body"] is not None and tx["body"]["signer"] for tx in network["txs"])
    assert node.join_tx.upper() in [tx["hash"] for tx in network["txs"]]
    assert [tx["height"] for tx in network["txs"]] == sorted((tx["height"] for tx in network["txs"]), reverse=True)


def test_the_tasks_page_lists_the_task_and_its_page_shows_members_and_rounds(node):
    async def check(client):
        listing = await (await client.get("/api/tasks")).json()
        detail = await (await client.get(f"/api/tasks/{node.task_id}")).json()
        missing = await client.get("/api/tasks/999")
        bad_page = await client.get("/api/tasks?after=x")
        return listing, detail, missing.status, bad_page.status

    listing, detail, missing, bad_page = with_console(node.url, check)
    assert [(t["id"], t["status"]) for t in listing["tasks"]] == [(node.task_id, "running")] and listing["next"] is None
    assert detail["id"] == node.task_id and detail["members"][0]["worker"] == DEV_ADDRESS
    assert detail["members"][0]["paid"] == 0 and detail["members"][0]["slashed"] == 0
    assert detail["round_details"][0]["round"] == 0
    assert detail["round_details"][0]["proof"]["note"].startswith("proved at height ")
    assert detail["proof"]["verified"] and detail["proof"]["header_height"] == detail["proof"]["query_height"] + 1
    assert (missing, bad_page) == (404, 400)


def test_search_finds_a_task_a_transaction_and_an_address_and_says_when_nothing_matches(node):
    async def check(client):
        answers = []
        for query in (str(node.task_id), node.join_tx.lower(), DEV_ADDRESS, "nonsense", "999"):
            response = await client.get("/api/search", params={"q": query})
            assert response.status == 200
            answers.append(await response.json())
        return answers

    task, tx, address, nonsense, no_task = with_console(node.url, check)
    assert (task["kind"], task["task_id"]) == ("task", node.task_id)
    assert tx["kind"] == "tx" and tx["tx"]["hash"] == node.join_tx and tx["tx"]["body"]["signer"] == DEV_ADDRESS
    assert address["kind"] == "address" and address["account"]["balance"] > 0
    assert address["worker"]["registered"] and node.task_id in address["worker"]["tasks"]
    assert address["validator"] is not None  # the dev key operates the dev validator
    assert all(part["proof"]["verified"] for part in (address["account"], address["worker"], address["validator"]))
    assert nonsense["kind"] == "none" and no_task == {"kind": "none", "query": "999", "reason": "no task 999"}


@pytest.mark.skipif(not (DIST / "app.js").exists(), reason="the front end is not built (make setup builds it)")
def test_the_page_and_its_assets_are_served_with_labelled_controls(node):
    async def check(client):
        page = await client.get("/")
        script = await client.get("/assets/app.js")
        return page.status, await page.text(), script.status

    status, html, script = with_console(node.url, check)
    assert (status, script) == (200, 200)
    assert '<label for="search-input">' in html and 'role="status"' in html and "https://" not in html


def test_the_event_stream_sends_the_node_state_and_then_each_new_height(node):
    async def check(client):
        response = await client.get("/api/events")
        assert response.headers["Content-Type"].startswith("text/event-stream")
        heights = []
        while len(heights) < 2:
            line = (await asyncio.wait_for(response.content.readline(), 10)).decode()
            if line.startswith("data: "):
                heights.append(json.loads(line[6:])["height"])
        response.close()
        return heights

    first, second = with_console(node.url, check)
    assert 1 <= first < second


def test_a_state_change_without_the_token_or_from_another_origin_is_refused_and_changes_nothing(node):
    async def check(client):
        await client.get("/api/network")
        cached = len(client.server.app[CACHE].blocks)
        token = await csrf_token(client)
        origin = own_origin(client)
        refusals = [
            await client.post("/api/cache/refresh", headers={"Origin": origin}),
            await client.post("/api/cache/refresh", headers={"Origin": origin, CSRF_HEADER: "forged"}),
            await client.post("/api/cache/refresh", headers={"Origin": "http://evil.example", CSRF_HEADER: token}),
            await client.post("/api/cache/refresh", headers={CSRF_HEADER: token}),
        ]
        statuses = [r.status for r in refusals]
        reasons = [(await r.json())["error"] for r in refusals]
        unchanged = len(client.server.app[CACHE].blocks)
        accepted = await client.post("/api/cache/refresh", headers={"Origin": origin, CSRF_HEADER: token})
        return cached, statuses, reasons, unchanged, accepted.status, await accepted.json()

    cached, statuses, reasons, unchanged, accepted, answer = with_console(node.url, check)
    assert statuses == [403] * 4 and cached > 0 and unchanged == cached
    assert "CSRF" in reasons[0] and "CSRF" in reasons[1] and "evil.example" in reasons[2] and "none given" in reasons[3]
    assert accepted == 200 and answer["cleared_blocks"] == cached


def test_a_request_naming_another_host_is_refused(node):
    async def check(client):
        response = await client.get("/api/node", headers={"Host": "attacker.example:80"})
        return response.status

    assert with_console(node.url, check) == 403


def test_a_node_that_goes_down_shows_as_down_with_the_last_height_seen(tmp_path):
    with contextlib.ExitStack() as running:
        url = running.enter_context(dev_node(tmp_path / "node"))

        async def check(client):
            up = await (await client.get("/api/node")).json()
            await asyncio.to_thread(running.close)  # the node stops
            await asyncio.sleep(0.5)
            down = await (await client.get("/api/node")).json()
            network = await client.get("/api/network")
            return up, down, network.status, await network.json()

        up, down, status, answer = with_console(url, check, poll_seconds=0.1)
    assert up["up"] and up["height"] >= 1
    assert not down["up"] and down["last_height"] >= up["height"] and down["error"]
    assert status == 503 and not answer["node"]["up"] and answer["node"]["last_height"] == down["last_height"]
