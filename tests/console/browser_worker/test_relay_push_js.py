"""The browser worker's relay pusher (console/web/src/browser_worker/relay_push.js): the same signed headers as
compute/blobs/relay_auth.py's `sign_push` for the same inputs, and a round pushed from Node.js to a real relay
(compute/blobs/relay.py, its members read from an in-process chain) that serves it back; a push signed for
another relay's URL is refused."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import subprocess

import pytest
from market_helpers import MARKET_PARAMS, Market
from relay_helpers import base_url, run_relay
from wasm_helpers import NODE, ROOT

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.compute.blobs.relay_auth import sign_push

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

SCRIPT = "tests/console/browser_worker/relay_push_js.mjs"


def key_fields(key: PrivateKey) -> dict:
    return {"seed": key.seed.hex(), "address": encode_address(key.address)}


@pytest.mark.parametrize("relay", ["http://127.0.0.1:8700", "https://Relay.Example:443/base/", "http://[::1]:80/r"])
def test_javascript_signs_a_push_as_python_does(relay):
    key = PrivateKey(bytes(range(32)))
    request = {"op": "sign", **key_fields(key), "relay": relay, "taskId": 7, "round": 3, "resource": "checkpoints",
               "contentHash": "ab" * 32, "timestamp": 1_700_000_000}
    done = subprocess.run([NODE, SCRIPT], input=json.dumps(request), capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == sign_push(key, relay, 7, 3, "checkpoints", "ab" * 32, 1_700_000_000)


@pytest.fixture
def market(make_chain):
    market = Market(make_chain(accounts=5, validators=1, params={"market": MARKET_PARAMS}))
    market.task_id = market.open_task(workers=2)
    return market


async def push_from_node(request: dict) -> dict:
    process = await asyncio.create_subprocess_exec(NODE, SCRIPT, stdin=asyncio.subprocess.PIPE,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                   cwd=ROOT)
    out, err = await asyncio.wait_for(process.communicate(json.dumps(request).encode()), 120)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


def test_a_javascript_worker_pushes_its_round_to_a_real_relay_and_a_push_for_another_relay_is_refused(market, tmp_path):
    member = market.workers[0]
    worker = encode_address(member.address)
    checkpoints = [b"checkpoint %d" % i * 50 for i in range(3)]
    others = [b"update bytes" * 20, b"residual bytes" * 30]
    blobs = {hashlib.sha256(data).hexdigest(): data for data in checkpoints + others}
    checkpoint_hashes = [hashlib.sha256(data).hexdigest() for data in checkpoints]
    request = {"op": "push", **key_fields(member), "taskId": market.task_id, "round": 0,
               "blobs": {digest: base64.b64encode(data).decode() for digest, data in blobs.items()},
               "checkpoints": checkpoint_hashes}

    async def test(client, relay):
        assert await push_from_node(dict(request, relayUrl=base_url(client))) == {"ok": True}
        for digest, data in blobs.items():
            response = await client.get(f"/workers/{worker}/blobs/{digest}")
            assert response.status == 200 and await response.read() == data
        listing = await client.get(f"/workers/{worker}/tasks/{market.task_id}/rounds/0/checkpoints")
        assert await listing.json() == {"checkpoint_hashes": checkpoint_hashes}

        other = {hashlib.sha256(b"another blob").hexdigest(): base64.b64encode(b"another blob").decode()}
        refused = await push_from_node(dict(request, relayUrl="http://relay.other.example:8700",
                                            reachAt=base_url(client), blobs=other, checkpoints=[]))
        assert refused["error"].startswith("BlobRejected:") and refused["status"] == 421
        assert "signed for the relay http://relay.other.example:8700" in refused["error"]
        assert (await client.get(f"/blobs/{next(iter(other))}")).status == 404

    run_relay(market, tmp_path, test)
