"""The requester library (`wallet/requester.py`) against a fake node running the real chain rules: `submit_task`
reads the new task's id from its own transaction's `submitted` event, refuses a private spec without a key
commitment before anything is signed, and gives each model its round window; `follow_task` reports each look
and stops its data server when the task ends."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from key_helpers import private_spec
from market_helpers import spec_bytes
from trolly.chain.hd import dev_key
from trolly.chain.proto import market_pb2
from trolly.compute.blobs import BlobStore
from trolly.compute.requester.serving import ServingThread
from trolly.wallet.errors import WalletError
from trolly.wallet.market_queries import get_task
from trolly.wallet.requester import (DEFAULT_ROUND_BLOCKS, ROUND_BLOCKS_BY_ARCH, Looked, TaskOrder, follow_task,
                                     plan_order, round_blocks_for, sending_with, submit_message, submit_task,
                                     submitted_task_id)
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.rpc_types import Event, TxResult
from trolly.wallet.sender import SendOutcome

from wallet_helpers import fake_node  # noqa: F401  (fixture)

TRL = 10**6


def run_against(node, work):
    async def go():
        async with AsyncRpcClient(node.url) as client:
            return await work(client)

    return asyncio.run(go())


def test_each_submission_gets_the_id_its_own_transaction_made_not_the_newest_with_its_spec(fake_node):
    """Two tasks of one spec from one requester: the old lookup ("the newest live task with my spec hash") named
    the second for both once it was listed; each submission now reads its own transaction's event."""
    order = TaskOrder(spec_bytes(), 50 * TRL)

    async def submit_twice(client):
        send = sending_with(client, dev_key(0))
        first = await submit_task(client, order, send)
        second = await submit_task(client, order, send)
        return first, second, await get_task(client, first.task_id)

    first, second, listed = run_against(fake_node, submit_twice)
    assert (first.task_id, second.task_id) == (1, 2)
    assert listed.budget == first.plan.budget and listed.round_blocks == DEFAULT_ROUND_BLOCKS


def test_a_private_spec_without_a_key_commitment_is_refused_before_anything_is_signed(fake_node):
    sent = []

    async def send(messages):
        sent.append(messages)
        raise AssertionError("nothing may be sent")

    with pytest.raises(WalletError, match="private"):
        run_against(fake_node, lambda client: submit_task(client, TaskOrder(private_spec(), 50 * TRL), send))
    assert sent == []


def test_a_transaction_without_a_submitted_event_names_no_task():
    included = TxResult("AB", 3, 0, 0, "", "", (Event("task", (("id", "7"), ("action", "joined"))),), b"")
    with pytest.raises(WalletError, match="made no task"):
        submitted_task_id(SendOutcome("AB", 1, included))
    made = TxResult("AB", 3, 0, 0, "", "", (Event("task", (("id", "7"), ("action", "submitted"))),), b"")
    assert submitted_task_id(SendOutcome("AB", 1, made)) == 7
    with pytest.raises(WalletError):
        submitted_task_id(SendOutcome("AB", 1, None))  # not waited for: no result to read


def test_a_lora_task_gets_its_longer_round_window_unless_the_requester_names_one():
    """The drift the console had: it submitted every template with 30 blocks, and a LoRA round outlasts them."""
    lora = json.loads(spec_bytes())
    lora["model"] = {"arch": "lora-text"}
    spec = json.dumps(lora).encode()
    assert round_blocks_for(spec) == ROUND_BLOCKS_BY_ARCH["lora-text"] > DEFAULT_ROUND_BLOCKS
    assert round_blocks_for(spec_bytes()) == DEFAULT_ROUND_BLOCKS
    assert TaskOrder(spec, 1).round_window == ROUND_BLOCKS_BY_ARCH["lora-text"]
    assert TaskOrder(spec, 1, round_blocks=50).round_window == 50


def test_following_reports_each_look_and_stops_serving_when_the_task_ends(fake_node, tmp_path):
    server = ServingThread(BlobStore(tmp_path / "blobs"), "127.0.0.1", 0).start()

    async def follow(client):
        submitted = await submit_task(client, TaskOrder(spec_bytes(), 50 * TRL), sending_with(client, dev_key(0)))
        cancel = market_pb2.MsgCancelTask(task_id=submitted.task_id)
        events = follow_task(client, submitted.task_id, serving=server, look_seconds=0.05)
        seen = []
        async with contextlib.aclosing(events):
            async for event in events:
                seen.append(event)
                if len(seen) == 1:
                    assert server._thread.is_alive()  # served while the task lives
                    await sending_with(client, dev_key(0))([cancel])
        return seen

    seen = run_against(fake_node, follow)
    assert all(isinstance(event, Looked) for event in seen)
    assert seen[0].view.status == "open" and not seen[0].ended
    assert seen[-1].ended and seen[-1].view.status == "cancelled"
    assert not server._thread.is_alive()  # stopped by the follow at the end


def test_the_message_is_the_orders_terms_as_the_plan_prices_them(fake_node):
    order = TaskOrder(spec_bytes(), 50 * TRL, workers=2, join_blocks=7, samples_per_worker=1)

    planned = run_against(fake_node, lambda client: plan_order(client, order))
    message = submit_message(order, planned)
    assert (message.workers, message.join_blocks, message.samples_per_worker, message.round_blocks) == (
        2, 7, 1, DEFAULT_ROUND_BLOCKS)
    assert (message.budget, message.reward_per_round, message.collateral) == (
        planned.budget, planned.reward_per_round, planned.collateral)
