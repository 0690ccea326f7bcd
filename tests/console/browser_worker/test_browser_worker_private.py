"""A private task in a browser tab, on a real solo localnet, in Chromium (issue 37 item 2, "fetches and decrypts
its data shards"; "Bad input": a shard that does not decrypt). A requester packs a small table (the digits as a
CSV) encrypted for a one-member MLP task that allows only `wasm32`, so the tab is its one member:

- honest: `trolly-wallet task submit --data` serves the sealed shards and delivers the key to the tab once it joins;
  the tab opens its box, decrypts the shards, trains the round, and the verifiers (keyed too) pass it;
- a box holding another key than the task committed to: the tab reports it on chain as a native member does
  (`MsgReportBadKey` with the proof made in JavaScript), the chain opens the box itself and releases the tab with
  its collateral and a compensation; the page says so, and the report is the only thing signed after the join;
- shards sealed under another key than the committed (and delivered) one: the page says the data does not decrypt,
  and signs nothing after the join.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import subprocess
import time
from types import SimpleNamespace

import pytest

from browser_worker_helpers import chromium, create_key, join, message, register, skip_without_the_page, worker_tab
from localnet_helpers import WALLET, exported_env, free_base_port, localnet, query, task_ended, wallet_in, \
    wait_until
from test_browser_worker_e2e import browser_task_spec
from whole_task import whole_task
from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.market.data_keys import box_context, data_key_hash
from trolly.chain.proto import market_pb2
from trolly.compute.data.encryption import new_data_key
from trolly.compute.requester.cli import prepare_data_submission
from trolly.compute.wasm.profile import PROFILE_ID
from trolly.wallet.box_proofs import seal_with_sender_proof
from trolly.wallet.key_delivery import deliver_data_keys
from trolly.wallet.keyring import Keyring
from trolly.wallet.market_queries import get_key_recipients
from trolly.wallet.public_keys import find_public_key
from trolly.wallet.requester import TaskOrder, submit_task
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import TxSender

pytestmark = pytest.mark.slow
sync_api = skip_without_the_page(pytest)

BUDGET = 50_000_000  # 50trl


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    """A solo localnet without native workers (a wasm32-only task is the tabs' alone), its page, the requester's
    wallet and key, and the digits written as a CSV table."""
    tmp = tmp_path_factory.mktemp("private")
    home = tmp / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--workers", "0", "--slow-workers", "0", "--home", str(home),
                  "--base-port", str(free_base_port(workers=0)), timeout=180.0)
    try:
        env = exported_env(up)
        yield SimpleNamespace(env=env, node=env["TROLLY_NODE"], wallet=wallet_in(env, tmp), tmp=tmp,
                              page=re.search(r"browser worker: (\S+)", up.stdout + up.stderr).group(1),
                              requester=Keyring(env["TROLLY_WALLET_HOME"], backend="test").signer("requester"),
                              table=digits_table(tmp / "digits.csv"))
    finally:
        localnet("down", "--home", str(home), timeout=120.0, check=False)


def digits_table(path):
    from sklearn.datasets import load_digits

    digits = load_digits()
    rows = [",".join([f"p{i}" for i in range(64)] + ["digit"])]
    rows += [",".join([str(int(value)) for value in row] + [str(label)]) for row, label in zip(digits.data,
                                                                                               digits.target)]
    path.write_text("\n".join(rows) + "\n")
    return path


def on_a_thread(coroutine_function, *args):
    """Run the coroutine on a thread of its own (Playwright's sync API holds this thread's event loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coroutine_function(*args))).result(timeout=300)


def node_read(node: str, path: str) -> dict:
    async def read():
        async with AsyncRpcClient(node) as client:
            return await client.query_json(path)
    return on_a_thread(read)


async def submit_private(node: str, requester, spec: bytes, key_hash: bytes) -> int:
    """Task `spec` for one member, committed to `key_hash`, submitted by the requester's own library code."""
    async with AsyncRpcClient(node) as client:
        async def send(messages):
            sender = TxSender(client)
            return await sender.send(requester, await sender.plan(encode_address(requester.address), messages)), None

        order = TaskOrder(spec, BUDGET, workers=1, round_blocks=60, data_key_hash=key_hash)
        return (await submit_task(client, order, send)).task_id


async def deliver_when_joined(node: str, requester, task_id: int, address: str, key: bytes, honest: bool) -> None:
    """Once `address` may be keyed, seal `key` to it: through `deliver_data_keys` when `honest` (it refuses a key
    the task did not commit to), else a box of the requester's own making holding `key` whatever it is."""
    async with AsyncRpcClient(node) as client:
        for _ in range(240):
            recipients = await get_key_recipients(client, task_id)
            if address in [recipient.address for recipient in recipients.recipients]:
                break
            await asyncio.sleep(0.5)
        sender = TxSender(client)
        if honest:
            assert (await deliver_data_keys(client, sender, requester, task_id, key)).delivered == (address,)
            return
        sealed, proof = seal_with_sender_proof(key, await find_public_key(client, address), box_context(task_id))
        message = market_pb2.MsgDeliverKey(task_id=task_id, recipient=decode_address(address), sealed_key=sealed,
                                           sender_proof=proof)
        await sender.send(requester, await sender.plan(encode_address(requester.address), [message]))


def funded_tab(net, browser):
    tab = worker_tab(browser, net.page)
    address = create_key(tab)
    net.wallet("tx", "send", address, "150trl", "--from", "requester", "--yes")  # stake and collateral
    register(tab)
    return tab, address


def join_or_say(tab, task_id: int) -> None:
    """`join`, failing with what the page says when it does not join."""
    try:
        join(tab, task_id)
    except Exception:
        raise AssertionError(f"the tab did not join task {task_id}: {tab.inner_text('#message')!r}") from None


def commitments_of(task: dict, worker: str) -> list:
    return [c for r in task.get("round_details", []) for c in r["commitments"] if c["worker"] == worker]


def test_a_tab_opens_its_delivered_key_decrypts_the_shards_and_trains_a_verified_round(net, tmp_path):
    spec = browser_task_spec(tmp_path / "spec.json", "0" * 64, "http://replaced", rounds=1, kernels=("wasm32",))
    log = tmp_path / "requester.log"
    with chromium(sync_api) as browser, log.open("w") as output:
        tab, address = funded_tab(net, browser)
        requester = subprocess.Popen(
            [WALLET, "task", "submit", str(spec), "--data", str(net.table), "--private", "--workers", "1",
             "--budget", "50trl", "--round-blocks", "60", "--listen", "127.0.0.1:0", "--from", "requester", "--yes"],
            stdout=output, stderr=subprocess.STDOUT, text=True, env=net.env, cwd=tmp_path)
        try:
            task_id = int(wait_until(lambda: re.search(r"Task (\d+) submitted", log.read_text()), 120,
                                     "the task's submission").group(1))
            join_or_say(tab, task_id)
            tab.wait_for_selector("body[data-phase=finished], #message:not([hidden])", timeout=400_000)
            assert tab.evaluate("document.body.dataset.phase") == "finished", tab.inner_text("#message")
            reported = tab.inner_text("#earn-final")
            paid = tab.inner_text("#earn-paid")
            tab.problems.check()
            assert requester.wait(timeout=300) == 0, log.read_text()
        finally:
            requester.kill()
    assert f"Data key delivered to {address}." in log.read_text()
    task = task_ended(net.node, task_id, timeout=120.0)
    assert task["status"] == "completed", task["status"]
    member = next(m for m in task["members"] if m["worker"] == address)
    assert member["paid"] > 0 and member["slashed"] == 0 and paid == f"{member['paid']} utrl", member
    mine = commitments_of(task, address)
    assert mine and mine[0]["outcome"] == "passed" and mine[0]["determinism_profile"] == PROFILE_ID, mine
    assert reported == task["final_weights_hash"]


def test_a_box_holding_another_key_is_reported_with_a_proof_made_in_the_tab_and_the_tab_released(net, tmp_path):
    """Attack: the requester commits to one key and seals another to the tab (so that it trains on nothing, or
    leaves paying the missed-round penalty). The tab proves the box bad on chain; the chain opens it with the
    proof, releases the tab with its collateral and a compensation from the requester."""
    spec = browser_task_spec(tmp_path / "spec.json", "0" * 64, "http://replaced", rounds=1, kernels=("wasm32",))
    prepared = prepare_data_submission(str(net.table), str(spec), None, None, (), "127.0.0.1:0", None, private=True)
    try:
        with chromium(sync_api) as browser:
            tab, address = funded_tab(net, browser)
            task_id = on_a_thread(submit_private, net.node, net.requester, prepared.spec, prepared.data_key_hash)
            join_or_say(tab, task_id)
            joined = node_read(net.node, f"/account/{address}")["balance"]
            on_a_thread(deliver_when_joined, net.node, net.requester, task_id, address, new_data_key(), False)
            shown = message(tab, timeout=120_000)
            tab.problems.check()
    finally:
        prepared.server.stop()
    words = re.fullmatch(
        rf"Task {task_id} cannot be trained here: the data key the requester delivered to this worker does not open "
        rf"the task's data \(task {task_id}: the box holds another key than the one the task committed to\)\. This "
        r"worker reported it on chain in block (\d+), with a proof that lets the chain open the box without this "
        r"worker's secret key: the chain released it from the task with its collateral and (\d+) utrl of "
        r"compensation from the requester\. Nothing more is signed for this task\. What to do: nothing; this worker "
        r"may join another task\.", shown)
    assert words, shown
    task = whole_task(lambda path: query(net.node, path), task_id)
    member = next(m for m in task["members"] if m["worker"] == address)
    assert member["status"] == "left" and member["reason"] == "bad data key", member
    assert member["compensated"] > 0 and words.group(2) == str(member["compensated"])
    account = query(net.node, f"/account/{address}")
    assert account["nonce"] == 3  # registration, join, the report: nothing else
    assert account["balance"] > joined + task["collateral"]  # collateral back, and a compensation above the fee
    assert commitments_of(task, address) == []


def test_shards_sealed_under_another_key_than_the_committed_one_are_explained_and_nothing_is_signed(net, tmp_path):
    """Attack (or a requester's mistake): the task commits to, and delivers, a key its shards were not sealed
    under. The tab's key opens, its shards do not: the page says so and signs nothing after the join."""
    spec = browser_task_spec(tmp_path / "spec.json", "0" * 64, "http://replaced", rounds=1, kernels=("wasm32",))
    prepared = prepare_data_submission(str(net.table), str(spec), None, None, (), "127.0.0.1:0", None, private=True)
    committed = new_data_key()  # not the shards' key
    try:
        with chromium(sync_api) as browser:
            tab, address = funded_tab(net, browser)
            task_id = on_a_thread(submit_private, net.node, net.requester, prepared.spec, data_key_hash(committed))
            join_or_say(tab, task_id)
            on_a_thread(deliver_when_joined, net.node, net.requester, task_id, address, committed, True)
            shown = message(tab, timeout=120_000)
            time.sleep(5)  # blocks go by with the tab open: a tab that went on would sign now
            tab.problems.check()
    finally:
        prepared.server.stop()
    assert shown == (f"Task {task_id} cannot be trained here: its data does not decrypt with the delivered key (the "
                     f"shard does not open with this data key (another task's key, or changed bytes)). Nothing more is "
                     f"signed for this task. What to do: tell the requester, whose data or key is wrong; this worker's "
                     f"missed rounds are a penalty, never a slash."), shown
    assert query(net.node, f"/account/{address}")["nonce"] == 2  # its registration and join, nothing after
    assert commitments_of(whole_task(lambda path: query(net.node, path), task_id), address) == []
