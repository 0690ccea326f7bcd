"""A LoRA task submitted from the console runs to completion: a requester's JSONL uploaded to the New task page's
API for the LoRA template (packed private, as token ids), submitted with the console's keyring key, served and
keyed by the console's follow loop (the requester library's `follow_task`), trained by a worker and replayed by
the verifier of a real localnet (solo engine), settled, and its final model fetched and zipped by the console.

The console once submitted every template with the MLP's 30-block round window; a LoRA round outlasts it and
the task ended abandoned with no commitment. It now submits through the requester library the CLI uses, which
gives a LoRA spec its longer window (`wallet.requester.round_blocks_for`).
"""

from __future__ import annotations

import asyncio
import io
import zipfile

import pytest
from aiohttp import FormData

from console_helpers import csrf_token, own_origin, with_console
from localnet_helpers import free_base_port, localnet
from requester_helpers import write_texts
from trolly.chain.market.records import LIVE_STATUSES
from trolly.console.security import CSRF_HEADER
from trolly.console.server import CLIENT
from trolly.wallet.market_queries import get_task_overview
from trolly.wallet.requester import ROUND_BLOCKS_BY_ARCH

pytestmark = pytest.mark.slow
TASK_SECONDS = 900.0


def test_a_lora_task_submitted_from_the_console_completes_with_final_weights_it_fetches(tmp_path):
    home = tmp_path / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--workers", "1", "--home", str(home), "--base-port",
                  str(free_base_port(workers=1)), timeout=180.0)
    try:
        exported = [line for line in (up.stdout + up.stderr).splitlines() if line.startswith("export ")]
        env = dict(pair.split("=", 1) for pair in exported[0].split()[1:])
        texts = write_texts(tmp_path / "texts.jsonl", every=20).read_bytes()

        async def check(client):
            headers = {CSRF_HEADER: await csrf_token(client), "Origin": own_origin(client)}
            form = FormData()
            form.add_field("file", texts, filename="texts.jsonl", content_type="application/octet-stream")
            form.add_field("template", "lora-text")
            form.add_field("private", "on")
            uploaded = await client.post("/api/new-task/upload", data=form, headers=headers)
            summary = await uploaded.json()
            assert uploaded.status == 200, summary
            submitted = await client.post("/api/new-task/submit", headers=headers, json={
                "template": "lora-text", "pack": summary["pack"], "budget": "50trl", "workers": "1", "rounds": "1",
                "key": "requester", "password": ""})
            answer = await submitted.json()
            assert submitted.status == 200, answer
            chain = client.server.app[CLIENT]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TASK_SECONDS
            task = await get_task_overview(chain, answer["task_id"])
            while task.status in LIVE_STATUSES and loop.time() < deadline:
                await asyncio.sleep(2.0)
                task = await get_task_overview(chain, answer["task_id"])
            fetched = await client.post(f"/api/tasks/{answer['task_id']}/model", headers=headers)
            model = await client.get(f"/api/tasks/{answer['task_id']}/model") if fetched.status == 200 else None
            return answer, task, (fetched.status, await fetched.json()), model and await model.read()

        answer, task, fetched, archive = with_console(env["TROLLY_NODE"], check, home=env["TROLLY_WALLET_HOME"],
                                                      keyring_backend="test", allow_private_addresses=True)
        assert answer["round_blocks"] == ROUND_BLOCKS_BY_ARCH["lora-text"] == task.round_blocks
        assert task.status == "completed" and task.final_weights_hash, task
        assert fetched[0] == 200, fetched
        names = zipfile.ZipFile(io.BytesIO(archive)).namelist()
        assert {f"task-{task.id}/{name}" for name in ("adapter.safetensors", "model.safetensors", "labels.json",
                                                      "spec.json")} <= set(names)
    finally:
        localnet("down", "--home", str(home), check=False)
