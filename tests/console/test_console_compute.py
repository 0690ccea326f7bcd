"""The Provide compute page's API over HTTP against a real `trolly-node dev`: a key created in a
password-protected keyring (its mnemonic never sent), the preflight measured by the worker's own library, a
wrong password that starts nothing, and a real `trolly-worker` started as a supervised process that registers
on chain (its registration and earnings shown), then stopped."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from console_helpers import DEV_ADDRESS, PASSWORD, file_keyring, guarded_post as post, with_console
from dev_node import dev_node

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with dev_node(tmp_path_factory.mktemp("console-compute") / "node") as url:
        yield url



def test_a_key_is_created_without_its_mnemonic_reaching_the_page(node, tmp_path):
    home = file_keyring(tmp_path / "home")

    async def check(client):
        made = await post(client, "/api/compute/keys", {"name": "provider", "password": PASSWORD})
        wrong = await post(client, "/api/compute/keys", {"name": "other", "password": "not the password"})
        taken = await post(client, "/api/compute/keys", {"name": "provider", "password": PASSWORD})
        overview = await (await client.get("/api/compute")).json()
        return made, wrong, taken, overview

    made, wrong, taken, overview = with_console(node, check, home=home)
    assert made[0] == 200 and set(made[1]) == {"name", "address"}
    assert wrong[0] == 400 and wrong[1]["field"] == "new-password" and "wrong keyring password" in wrong[1]["error"]
    assert taken[0] == 400 and "already exists" in taken[1]["error"]
    assert [k["name"] for k in overview["keys"]] == ["dev", "provider"]
    assert overview["worker"]["running"] is False and overview["registration"] is None
    assert any((home / "keyring-file").glob("provider*"))


def test_the_preflight_measures_this_machine_with_the_workers_library(node, tmp_path):
    async def check(client):
        return await post(client, "/api/compute/preflight", {})

    status, answer = with_console(node, check, home=tmp_path / "home")
    assert status == 200 and answer["preflight"]["cores"] >= 1 and answer["preflight"]["samples_per_second"] > 0
    assert any(line.startswith("cores") for line in answer["lines"])
    assert (tmp_path / "home" / "console" / "worker" / "preflight.json").exists()


def test_a_wrong_password_starts_nothing_and_the_right_one_runs_a_worker_that_registers_until_stopped(node, tmp_path):
    home = file_keyring(tmp_path / "home")

    async def check(client):
        wrong = await post(client, "/api/compute/start", {"key": "dev", "password": "wrong password"})
        idle = await (await client.get("/api/compute")).json()
        started = await post(client, "/api/compute/start", {"key": "dev", "password": PASSWORD})
        again = await post(client, "/api/compute/start", {"key": "dev", "password": PASSWORD})
        deadline = time.monotonic() + 120
        while True:
            overview = await (await client.get("/api/compute")).json()
            if overview["registration"] or time.monotonic() > deadline or not overview["worker"]["running"]:
                break
            await asyncio.sleep(1)
        stop_status, stopped = await post(client, "/api/compute/stop", {})
        return wrong, idle, started, again, overview, stopped

    wrong, idle, started, again, overview, stopped = with_console(node, check, home=home)
    assert wrong[0] == 400 and wrong[1]["field"] == "worker-password"
    assert idle["worker"]["running"] is False and idle["worker"]["key"] is None  # not even set up
    assert started[0] == 200 and started[1]["running"] and started[1]["key"] == "dev"
    assert again[0] == 400 and "already running" in again[1]["error"]
    assert overview["registration"] and overview["registration"]["registered"], json.dumps(overview)[-3000:]
    assert overview["registration"]["address"] == DEV_ADDRESS and overview["earnings"]["tasks"] == []
    assert stopped["running"] is False and stopped["exit_code"] is not None
