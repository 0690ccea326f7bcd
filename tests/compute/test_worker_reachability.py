"""Whether a worker's blob service is reachable, asked of a probe (issue 28 item 1): the relay validators run
(`trolly-verifier relay`) serves `POST /probe`, fetching one blob from the URL it is given under its address
policy and saying whether the right bytes came back; `trolly-worker preflight --probe URL` serves a fresh probe
blob from the worker home's blob port, asks, and reports it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import subprocess
import sys
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner

from dev_node import stop_process_group
from net_helpers import free_port
from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore
from trolly.compute.blobs.reachability import PROBE_BLOB_LIMIT
from trolly.compute.blobs.relay import Relay, RelayOptions, build_relay_app
from trolly.compute.blobs.relay_members import ChainMembers
from trolly.compute.blobs.relay_store import RelayStore
from trolly.compute.worker.cli import main
from trolly.wallet.rpc import AsyncRpcClient

BIN = pathlib.Path(sys.executable).parent


def ask(tmp_path, request_body, allow_private: bool = True, blob: bytes = b"probe blob"):
    """(status, answer) of one POST /probe to a relay app, with a blob service on 127.0.0.1 holding `blob`."""

    async def main_():
        store = BlobStore(tmp_path / "worker")
        digest = store.put(blob)
        server = BlobServer(store, owner_token="", host="127.0.0.1", port=0)
        await server.start()
        relay = Relay(RelayStore(tmp_path / "relay"), ChainMembers(AsyncRpcClient("http://127.0.0.1:9")),
                      RelayOptions(probe_addresses=AddressPolicy(allow_private=allow_private)))
        try:
            async with TestClient(TestServer(build_relay_app(relay))) as client:
                response = await client.post("/probe", json=request_body(server.url, digest))
                return response.status, await response.json()
        finally:
            await server.stop()
            await relay.members.client.close()

    return asyncio.run(main_())


def test_the_relays_probe_fetches_the_blob_and_says_it_came_back(tmp_path):
    status, answer = ask(tmp_path, lambda url, digest: {"url": url, "blob": digest})
    assert status == 200 and answer["reachable"] is True and answer["seconds"] >= 0


@pytest.mark.parametrize("case, words", [
    ("missing blob", "not found"),
    ("private address refused", "loopback"),
    ("too large", "exceeds the limit"),
    ("nothing listening", "gave up"),
])
def test_the_probe_says_unreachable_with_the_reason(tmp_path, case, words):
    other = hashlib.sha256(b"never stored").hexdigest()
    dead = f"http://127.0.0.1:{free_port()}"
    request_body = {"missing blob": lambda url, digest: {"url": url, "blob": other},
                    "nothing listening": lambda url, digest: {"url": dead, "blob": digest}}.get(
        case, lambda url, digest: {"url": url, "blob": digest})
    status, answer = ask(tmp_path, request_body, allow_private=case != "private address refused",
                         blob=b"x" * (PROBE_BLOB_LIMIT + 1) if case == "too large" else b"probe blob")
    assert status == 200 and answer["reachable"] is False and words in answer["detail"], answer


@pytest.mark.parametrize("body", [{"url": "ftp://x", "blob": "ab" * 32}, {"url": "http://x"},
                                  {"url": "http://x", "blob": "not-a-hash"}, ["http://x"]])
def test_a_malformed_probe_request_is_refused(tmp_path, body):
    status, answer = ask(tmp_path, lambda url, digest: body)
    assert status == 400 and "a probe takes" in answer["error"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"TROLLY_WORKER_HOME": None,
                                                                 "TROLLY_WALLET_PASSWORD": None})


def test_preflight_asks_a_running_relay_whether_the_blob_service_is_reachable(tmp_path):
    port = free_port()
    probe = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "relay.log"
    with open(log_path, "wb") as log:
        relay = subprocess.Popen([str(BIN / "trolly-verifier"), "relay", "--node", "http://127.0.0.1:9", "--port",
                                  str(port), "--home", str(tmp_path / "relay"), "--allow-private-blob-hosts"],
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "relay serving" not in log_path.read_text():
            assert relay.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        home = tmp_path / "w"
        assert invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key",
                      "--node", "http://127.0.0.1:9").exit_code == 0
        reached = json.loads(invoke("preflight", "--home", home, "--probe", probe, "-o", "json").output)
        assert reached["reachability"]["checked"] and reached["reachability"]["reachable"], reached["reachability"]
        assert not [p for p in (home / "blobs").rglob("*") if p.is_file()]  # the probe blob is gone

        hidden = tmp_path / "hidden"  # registers a public URL nothing answers at
        assert invoke("init", "--home", hidden, "--key", "w", "--keyring-backend", "test", "--create-key",
                      "--node", "http://127.0.0.1:9", "--public-url", f"http://127.0.0.1:{free_port()}",
                      "--probe", probe).exit_code == 0
        kept = json.loads((hidden / "preflight.json").read_text())["reachability"]
        assert kept["checked"] and not kept["reachable"] and "could not fetch" in kept["detail"]
        text = invoke("preflight", "--home", hidden, "--probe", probe).output
        assert "reachable         NO: the probe at" in text
    finally:
        stop_process_group(relay)
    silent = invoke("preflight", "--home", home, "--probe", probe).output
    assert "reachable         not checked: the probe at" in silent and "did not answer" in silent
    refused = invoke("preflight", "--home", tmp_path / "nobody", "--probe", probe)
    assert refused.exit_code != 0 and "run trolly-worker init first" in refused.output
