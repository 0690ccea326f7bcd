"""`wallet.key_delivery` against a node running the real chain rules: a private task's members are
keyed once it runs, and a validator's operator only once drawn onto one of its committees, although it has
signed nothing, because genesis holds the operator's public key.

The requester here is not the operator (on a dev node they are the same key, whose own transactions would put
its key on chain anyway), so the operator's account shows nonce 0 throughout. Without the key in genesis the
requester cannot seal to the operator and says so; the worker is keyed either way."""

from __future__ import annotations

import base64
import json

import nacl.signing
import pytest

from market_helpers import MARKET_PARAMS, SPEC, STAKE, commit_message, submit_message
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.market.data_keys import box_context, data_key_hash
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.data.encryption import new_data_key, open_data_key
from trolly.wallet.key_delivery import deliver_data_keys
from trolly.compute.sealed_keys import BadDataKey, bad_key_report, received_data_key
from trolly.wallet.box_proofs import seal_with_sender_proof
from trolly.wallet.errors import WalletError
from trolly.wallet.market_queries import find_data_key, get_task_overview
from trolly.wallet.rpc import RpcClient
from trolly.wallet.sender import TxSender, fetch_account
from wallet_helpers import FakeNode, dev_app_state

OPERATOR, REQUESTER, WORKER = dev_key(0), dev_key(5), dev_key(31)
FUNDS = 10**12


def node_app_state(operator_key_in_genesis: bool) -> dict:
    app_state = dev_app_state({"auth": {"min_fee": 0, "fee_per_byte": 0}, "market": MARKET_PARAMS})
    if operator_key_in_genesis:
        app_state["accounts"][0]["pub_key"] = base64.b64encode(OPERATOR.pubkey).decode()
    app_state["accounts"] += [{"address": encode_address(key.address), "balance": str(FUNDS)}
                              for key in (REQUESTER, WORKER)]
    return app_state


async def send(client: RpcClient, key, message):
    sender = TxSender(client.async_client)
    plan = await sender.plan(encode_address(key.address), [message])
    return await sender.send(key, plan, timeout=20)


def private_task_with_its_worker(client: RpcClient, data_key: bytes) -> int:
    """Submit a one-worker private task committed to `data_key` as the requester and have the worker register
    and join it: it runs."""
    spec = json.loads(json.dumps(SPEC))
    spec["dataset"]["cipher"] = "xsalsa20poly1305"

    async def scenario() -> int:
        await send(client, REQUESTER, submit_message(spec=json.dumps(spec).encode(), workers=1, join_blocks=1000,
                                                     round_blocks=1000, data_key_hash=data_key_hash(data_key)))
        await send(client, WORKER, pb.MsgRegisterWorker(stake=STAKE, blob_url="http://127.0.0.1:9000",
                                                        hardware=pb.HardwareProfile(device="cpu", samples_per_second=100,
                                                                                    memory_mb=1024, threads=1)))
        await send(client, WORKER, pb.MsgJoinTask(task_id=1))
        return 1

    return client.run(scenario())


def deliver(client: RpcClient, task_id: int, data_key: bytes):
    return client.run(deliver_data_keys(client.async_client, TxSender(client.async_client), REQUESTER, task_id,
                                        data_key))


@pytest.mark.parametrize("keyed", [True, False], ids=["operator-key-in-genesis", "no-operator-key"])
def test_members_are_keyed_once_the_task_runs_and_the_operator_once_drawn(keyed):
    node = FakeNode(node_app_state(operator_key_in_genesis=keyed)).start()
    try:
        with RpcClient(node.url) as client:
            data_key = new_data_key()
            task_id = private_task_with_its_worker(client, data_key)
            assert client.run(get_task_overview(client.async_client, task_id)).status == "running"
            worker, operator = encode_address(WORKER.address), encode_address(OPERATOR.address)
            delivery = deliver(client, task_id, data_key)
            assert delivery.delivered == (worker,) and delivery.without_public_key == ()  # the operator: not drawn
            box = client.run(find_data_key(client.async_client, task_id, worker))
            assert open_data_key(box.sealed_bytes, nacl.signing.SigningKey(WORKER.seed)) == data_key

            client.run(send(client, WORKER, commit_message(task_id, 0, "w")))
            node.wait_blocks(3)  # closed and sampled: the operator sits on the committee
            delivery = deliver(client, task_id, data_key)
            node.wait_blocks(2)
            assert client.run(fetch_account(client.async_client, operator)).nonce == 0  # it never signed
            box = client.run(find_data_key(client.async_client, task_id, operator))
            if keyed:
                assert delivery.delivered == (operator,) and delivery.without_public_key == ()
                assert open_data_key(box.sealed_bytes, nacl.signing.SigningKey(OPERATOR.seed)) == data_key
            else:
                assert delivery.delivered == () and delivery.without_public_key == (operator,) and box is None
    finally:
        node.stop()


def test_a_key_the_task_did_not_commit_to_is_not_delivered():
    node = FakeNode(node_app_state(operator_key_in_genesis=True)).start()
    try:
        with RpcClient(node.url) as client:
            task_id = private_task_with_its_worker(client, new_data_key())
            with pytest.raises(WalletError, match="not the one task 1 committed to"):
                deliver(client, task_id, new_data_key())
    finally:
        node.stop()


def test_a_worker_finds_its_box_bad_reports_it_and_is_released_with_compensation():
    """What the worker service and the verifier do with a junk box (`compute.sealed_keys`): the key it holds is
    not the one the task committed to, so `received_data_key` raises BadDataKey, and `bad_key_report` (the
    recipient's proof) is accepted on chain: the worker leaves with its collateral and a compensation."""
    node = FakeNode(node_app_state(operator_key_in_genesis=True)).start()
    try:
        with RpcClient(node.url) as client:
            task_id = private_task_with_its_worker(client, new_data_key())
            task = client.run(get_task_overview(client.async_client, task_id))
            sealed, proof = seal_with_sender_proof(new_data_key(), WORKER.pubkey, box_context(task_id))
            client.run(send(client, REQUESTER, pb.MsgDeliverKey(task_id=task_id, recipient=WORKER.address,
                                                                sealed_key=sealed, sender_proof=proof)))
            with pytest.raises(BadDataKey, match="another key") as bad:
                client.run(received_data_key(client.async_client, task_id, WORKER, task.data_key_hash))
            assert not bad.value.reported
            before = client.run(fetch_account(client.async_client, encode_address(WORKER.address))).balance
            client.run(send(client, WORKER, bad_key_report(task_id, WORKER, bad.value.sealed)))
            member = client.run(get_task_overview(client.async_client, task_id)).member(encode_address(WORKER.address))
            assert (member.status, member.reason, member.penalized) == ("left", "bad data key", 0)
            after = client.run(fetch_account(client.async_client, encode_address(WORKER.address))).balance
            assert after == before + task.collateral + member.compensated and member.compensated > 0
            assert client.run(get_task_overview(client.async_client, task_id)).status == "abandoned"  # nobody left
    finally:
        node.stop()
