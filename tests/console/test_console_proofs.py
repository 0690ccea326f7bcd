"""The console's chain reads prove what they show: against a node that answers a tampered value with a valid
proof of the true record, a read fails with the wallet's ProofInvalid (the server answers 502 with the reason)
instead of showing the lie."""

from __future__ import annotations

import pytest

from console_helpers import PASSWORD, csrf_token, file_keyring, own_origin, with_console
from market_helpers import STAKE, commit_message, submit_message
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.tx import build_tx
from trolly.console import chain_reads
from trolly.console.security import CSRF_HEADER
from trolly.wallet.errors import ProofInvalid
from trolly.wallet.rpc import RpcClient
from trolly.wallet.sender import fetch_account
from wallet_helpers import CHAIN_ID, DEV_BALANCE, fake_node  # noqa: F401  (fixture)

DEV_ADDRESS = encode_address(dev_key(0).address)


def test_an_address_search_shows_proven_answers(fake_node):
    with RpcClient(fake_node.url) as client:
        found = client.run(chain_reads.search(client.async_client, DEV_ADDRESS))
    assert found["account"]["balance"] == DEV_BALANCE and found["account"]["proof"]["verified"]
    assert found["validator"]["proof"]["note"].startswith("proved at height ")


def test_a_tampered_balance_or_validator_power_fails_the_read(fake_node):
    """Attack: the node inflates a balance and a validator's power in its JSON answers, keeping the true proofs."""
    def inflate(path, answer):
        if path.startswith("/account/"):
            return {**answer, "balance": answer["balance"] * 2}
        if path.startswith("/validator/"):
            return {**answer, "power": answer["power"] + 1}
        return answer

    fake_node.tamper_answer = inflate
    with RpcClient(fake_node.url) as client:
        with pytest.raises(ProofInvalid, match="balance differ from the proven record"):
            client.run(chain_reads.search(client.async_client, DEV_ADDRESS))
        with pytest.raises(ProofInvalid, match="power differ from the proven record"):
            client.run(chain_reads.network_overview(client.async_client, chain_reads.ReadCache()))


def tamper(fake_node, prefix: str, field: str, value) -> None:
    fake_node.tamper_answer = lambda path, answer: {**answer, field: value} if path.startswith(prefix) else answer


async def get(client, path: str):
    response = await client.get(path)
    return response.status, await response.json()


def test_the_network_page_proves_each_validators_detail_and_signing_info(fake_node):
    with RpcClient(fake_node.url) as client:  # the row alone: the fake node has no tx_search for the page's txs
        row = client.run(chain_reads._validator_row(client.async_client, DEV_ADDRESS))
    assert row["proof"]["note"].startswith("proved at height ") and "commission_rate" in row["proof"]["fields"]
    assert row["liveness_proof"]["verified"] and "missed_blocks_counter" in row["liveness_proof"]["fields"]
    assert row["delegators"] >= 1 and row["missed_blocks"] == 0


@pytest.mark.parametrize("prefix, field, value", [
    ("/validator/", "commission_rate", 1), ("/validator/", "delegator_shares", "1"),
    ("/signing_info/", "missed_blocks_counter", 9), ("/signing_info/", "jailed_until", 5),
    ("/signing_info/", "tombstoned", True)])
def test_a_tampered_commission_or_liveness_is_a_502_with_the_reason(fake_node, prefix, field, value):
    """Attack: the node shows a validator's commission (or delegator shares) or its missed blocks, jail height or
    tombstone other than its state holds, keeping the true proofs. Before, the Network page read those unproven."""
    tamper(fake_node, prefix, field, value)

    async def check(client):
        return await get(client, "/api/network")

    status, body = with_console(fake_node.url, check)
    assert status == 502 and f"{field} differ from the proven record" in body["error"]


def test_the_wallet_page_proves_each_keys_balance_and_a_tampered_one_is_a_502(fake_node, tmp_path):
    """Attack: the node inflates a key's balance (or its nonce) on the Wallet page, keeping the true proof."""
    home = file_keyring(tmp_path / "wallet")

    async def check(client):
        return await get(client, "/api/wallet")

    status, body = with_console(fake_node.url, check, home=home)
    assert status == 200, body
    [key] = body["keys"]
    assert key["balance"] == DEV_BALANCE and key["proof"]["note"].startswith("proved at height ")
    assert key["proof"]["fields"] == ["address", "balance", "nonce", "pub_key"]
    tamper(fake_node, "/account/", "balance", DEV_BALANCE + 1)
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "balance differ from the proven record" in body["error"]
    tamper(fake_node, "/account/", "nonce", 99)
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "nonce differ from the proven record" in body["error"]


def test_the_governance_proposal_page_is_proven_and_a_tampered_proposal_is_a_502(fake_node, tmp_path):
    """Attack: the node shows a proposal as passed, or with other param changes, than its state holds, keeping
    the true proof. Before, the Governance proposal page read it unproven."""
    home = file_keyring(tmp_path / "wallet")
    proposal = {"action": "submit", "key": "dev", "kind": "params", "title": "cheaper validators", "summary": "",
                "changes": "market.validator_fee_bps=300\n", "deposit": "1trl", "confirmed": True,
                "password": PASSWORD}

    async def submit(client):
        headers = {CSRF_HEADER: await csrf_token(client), "Origin": own_origin(client)}
        response = await client.post("/api/gov/sign", json=proposal, headers=headers)
        return response.status, await response.json()

    status, sent = with_console(fake_node.url, submit, home=home)
    assert status == 200 and sent["code"] == 0, sent
    fake_node.wait_blocks(1)

    async def check(client):
        return await get(client, "/api/gov/proposals/1")

    status, body = with_console(fake_node.url, check, home=home)
    assert status == 200, body
    assert body["title"] == "cheaper validators" and body["proof"]["note"].startswith("proved at height ")
    assert "status" in body["proof"]["fields"] and "deposits" in body["proof"]["fields"]  # now proven too
    tamper(fake_node, "/gov/proposal/", "status", "passed")
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "status differ from the proven record" in body["error"]
    tamper(fake_node, "/gov/proposal/", "changes", [])
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "changes differ from the proven record" in body["error"]


def test_a_listing_with_a_validator_left_out_fails_the_read_and_a_whole_one_is_proven(fake_node):
    """Attack: the node drops a validator from `/validators` (a listing the console used to take on trust), keeping
    the proofs of the records it still lists. The listing index's proof shows one is missing: the read fails."""
    with RpcClient(fake_node.url) as client:
        page = client.run(chain_reads.tasks_page(client.async_client, 0))
        assert page["proof"]["note"].startswith("proved at height ") and page["proof"]["fields"] == ["next", "tasks"]
        fake_node.tamper_answer = lambda path, answer: answer[1:] if path == "/validators" else answer
        with pytest.raises(ProofInvalid, match="entries differ from the proven records"):
            client.run(chain_reads.search(client.async_client, DEV_ADDRESS))


def test_the_wallet_page_proves_each_keys_delegations_and_rewards(fake_node, tmp_path):
    """Before, the Wallet page showed delegations and rewards unproven; a node inflating a reward is now a 502."""
    home = file_keyring(tmp_path / "wallet")

    async def check(client):
        return await get(client, "/api/wallet")

    status, body = with_console(fake_node.url, check, home=home)
    assert status == 200, body
    (key,) = body["keys"]
    assert key["delegations"]["proof"]["note"].startswith("proved at height ")
    assert key["rewards"]["proof"]["verified"] and body["validators_proof"]["verified"]
    tamper(fake_node, "/rewards/", "total", 10**9)
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "total differ from the proven record" in body["error"]


def send(client: RpcClient, *messages) -> None:
    """One transaction of the dev key's, included (the fake node's chain has free transactions)."""
    nonce = client.run(fetch_account(client.async_client, DEV_ADDRESS)).nonce
    result = client.broadcast_and_wait(build_tx(dev_key(0), CHAIN_ID, nonce, 0, list(messages)))
    assert result.code == 0, result.log


def running_task_with_a_commitment(fake_node) -> int:
    """The dev key registered as a worker, a one-worker task it joined and its round-0 commitment: task 1."""
    with RpcClient(fake_node.url) as client:
        send(client, pb.MsgRegisterWorker(stake=10 * STAKE, blob_url="http://127.0.0.1:8700", hardware=pb.HardwareProfile(
            device="cpu", samples_per_second=100, memory_mb=1024, threads=1)))
        send(client, submit_message(workers=1, round_blocks=50))
        send(client, pb.MsgJoinTask(task_id=1))
        send(client, commit_message(1, 0, "dev"))
    return 1


def test_the_task_page_proves_each_round_and_a_tampered_round_is_a_502(fake_node):
    """Attack: the node shows a round's commitment with another update hash, or the round's start weights, than
    its state holds, keeping the true proofs. Before, the task page read a round's pages unproven (their votes had
    no listing index, so the node sent no proof)."""
    task_id = running_task_with_a_commitment(fake_node)

    async def check(client):
        return await get(client, f"/api/tasks/{task_id}")

    status, body = with_console(fake_node.url, check)
    assert status == 200, body
    (first,) = body["round_details"][:1]
    assert first["commitments"] and first["proof"]["note"].startswith("proved at height ")
    assert first["proof"]["pages"] == 1 and first["proof"]["keys"] > 0
    fake_node.tamper_answer = lambda path, answer: (
        {**answer, "commitments": [{**answer["commitments"][0], "update_hash": "00" * 32}]}
        if "/round/0" in path and answer["commitments"] else answer)
    status, body = with_console(fake_node.url, check)
    assert status == 502 and "commitments differ from the proven record" in body["error"]
    tamper(fake_node, f"/market/task/{task_id}/round/", "start_weights_hash", "11" * 32)
    status, body = with_console(fake_node.url, check)
    assert status == 502 and "start_weights_hash differ from the proven record" in body["error"]


def test_the_compute_page_proves_each_keys_balance_and_the_registration(fake_node, tmp_path):
    """Attack: the node inflates a key's balance or the worker's stake on the Compute page, keeping the true
    proofs. Before, the Compute page read balances (and the registration) unproven."""
    home = file_keyring(tmp_path / "wallet")

    async def check(client):
        return await get(client, "/api/compute")

    status, body = with_console(fake_node.url, check, home=home)
    assert status == 200, body
    (key,) = body["keys"]
    assert key["balance"] == DEV_BALANCE and key["proof"]["note"].startswith("proved at height ")
    tamper(fake_node, "/account/", "balance", DEV_BALANCE + 1)
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "balance differ from the proven record" in body["error"]


def test_the_compute_pages_earnings_are_proven_and_a_tampered_pay_or_member_is_a_502(fake_node, tmp_path):
    """Attack: the node shows the console's worker more pay on a round than the chain holds, or hides a slash of
    its collateral, in the task answers the Compute page's earnings are built from (keeping the true proofs).
    Before, `compute.worker.earnings` read every task unproven; now each task is proven as the task page is."""
    import json

    from trolly.compute.worker.config import CONFIG_FILE

    task_id = running_task_with_a_commitment(fake_node)
    fake_node.wait_blocks(2)
    home = file_keyring(tmp_path / "wallet")
    worker_home = home / "console" / "worker"  # the console's LocalWorker, set up for the dev key
    worker_home.mkdir(parents=True)
    (worker_home / CONFIG_FILE).write_text(json.dumps({"key_name": "dev"}))

    async def check(client):
        return await get(client, "/api/compute")

    status, body = with_console(fake_node.url, check, home=home)
    assert status == 200, body
    earnings = body["earnings"]
    (task,) = earnings["tasks"]
    assert task["task_id"] == task_id and task["join_fee"] == 0 and task["collateral_locked"] > 0
    assert earnings["proof"]["note"].startswith("proved at height") and earnings["proof"]["keys"] > 0
    assert "transaction index" in earnings["proof"]["unproven"]
    fake_node.tamper_answer = lambda path, answer: (
        {**answer, "commitments": [{**answer["commitments"][0], "paid": 10**9}]}
        if "/round/0" in path and answer["commitments"] else answer)
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "commitments differ from the proven record" in body["error"]
    fake_node.tamper_answer = lambda path, answer: (
        {**answer, "members": [{**answer["members"][0], "slashed": 0, "status": "active"}]}
        if path == f"/market/task/{task_id}" else answer)
    status, body = with_console(fake_node.url, check, home=home)
    assert status == 502 and "members differ from the proven record" in body["error"]


def test_a_searched_task_id_is_found_by_a_proven_read_and_a_tampered_one_is_a_502(fake_node):
    """Attack: the node answers a task the searched id does not hold (another requester), keeping the true proofs.
    Before, the search read the whole task unproven to say it exists."""
    task_id = running_task_with_a_commitment(fake_node)

    async def check(client):
        return await get(client, f"/api/search?q={task_id}")

    status, body = with_console(fake_node.url, check)
    assert status == 200 and body["kind"] == "task" and body["task_id"] == task_id, body
    tamper(fake_node, f"/market/task/{task_id}", "requester", encode_address(dev_key(1).address))
    status, body = with_console(fake_node.url, check)
    assert status == 502 and "requester differ from the proven record" in body["error"]
