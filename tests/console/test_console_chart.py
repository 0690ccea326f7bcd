"""The task page's chart job against a real `trolly-node dev`, for a task this console did not submit: the
held-out split fetched from the spec's URL (public data served elsewhere), W_0 evaluated and matched against the
chain's agreed start, and then, where a verified round's update is served by nobody, the job stops and says why
instead of charting a guess."""

from __future__ import annotations

import asyncio
import hashlib

from console_helpers import csrf_token, own_origin, with_console
from trolly.console.security import CSRF_HEADER
from dev_node import Client, dev_node
from net_helpers import free_port
from market_helpers import commit_message, reveal_message, verdict_message
from verifier_helpers import expected_start
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.market.params import MarketParams
from trolly.chain.market.records import VERDICT_PASS
from trolly.chain.proto import bank_pb2, market_pb2 as pb
from trolly.compute.blobs import BlobStore
from trolly.compute.requester.serving import ServingThread
from trolly.compute.spec import parse_spec
from trolly.console.templates import TEMPLATES, build_spec, bundled
from trolly.wallet.tasks import plan_task

TRL = 10**6


def test_the_chart_fetches_public_data_and_stops_saying_why_when_a_verified_update_is_served_by_nobody(tmp_path):
    template = TEMPLATES["digits-mlp"]
    data = bundled(template, tmp_path / "elsewhere")  # the requester's own copy, not this console's
    with ServingThread(BlobStore(data.store_directory), "127.0.0.1", 0) as served, dev_node(tmp_path / "node") as url:
        client = Client(url)
        requester, worker = dev_key(0), dev_key(33)
        spec = build_spec(template, data, 1, [served.url])
        training = parse_spec(spec).training
        w0 = expected_start(parse_spec(spec), 0)  # the start every honest member commits to
        plan = plan_task(spec, MarketParams(**client.query("/market/params")), 20 * TRL, None, 1, 2, None)
        client.send(requester, bank_pb2.MsgSend(to=worker.address, amount=100 * TRL))
        client.send(worker, pb.MsgRegisterWorker(stake=MarketParams(**client.query("/market/params")).min_worker_stake,
                                                 blob_url=f"http://127.0.0.1:{free_port()}",  # nothing serves here
                                                 hardware=pb.HardwareProfile(device="cpu", samples_per_second=100)))
        client.send(requester, pb.MsgSubmitTask(
            spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=plan.budget, workers=1, rounds=1,
            reward_per_round=plan.reward_per_round, collateral=plan.collateral, join_blocks=100, round_blocks=30,
            samples_per_worker=2))
        task_id = max(t["id"] for t in client.query("/market/tasks")["tasks"])
        client.send(worker, pb.MsgJoinTask(task_id=task_id))
        client.send(worker, commit_message(task_id, 0, worker.address.hex(), start=w0, steps=training.inner_steps,
                                           checkpoint_every=training.checkpoint_every,
                                           samples_processed=training.inner_steps * training.batch_size))
        client.wait_for(task_id, lambda v: v["phase"] == "verify", "sampling")
        items = client.query(f"/market/verify/{encode_address(requester.address)}")["segments"]
        client.send(requester, *[verdict_message(requester, task_id, i, VERDICT_PASS) for i in items])
        client.wait_for(task_id, lambda v: v["round"] == 1, "round 0 settled")
        client.send(requester, *[reveal_message(task_id, i) for i in items])

        async def check(console):
            headers = {"Origin": own_origin(console), CSRF_HEADER: await csrf_token(console)}
            chart = await (await console.post(f"/api/tasks/{task_id}/chart", headers=headers)).json()  # starts it
            for _ in range(240):
                chart = await (await console.get(f"/api/tasks/{task_id}/chart")).json()
                if chart["state"] == "stopped":
                    break
                await asyncio.sleep(0.25)
            return chart

        chart = with_console(url, check, home=tmp_path / "console-home", allow_private_addresses=True)
    assert chart["state"] == "stopped" and "served by no member" in chart["problem"], chart
    (initial,) = chart["points"]  # W_0 only: W_1 is not charted from an update nobody can check
    assert initial["round"] == 0 and 0 < initial["accuracy"] < 0.5 and initial["loss"] > 0
    assert initial["chain_hash"] == initial["weights_hash"] and initial["matches_chain"] is True
    assert (tmp_path / "console-home" / "console" / "charts" / f"task-{task_id}.json").exists()  # the cached W_0
