"""wallet.rpc, wallet.sender and wallet.proofs against a fake CometBFT node running the real chain rules."""

import asyncio

import pytest
from aiohttp import web
from hypothesis import given, settings, strategies as st

from net_helpers import free_port
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.tx import build_tx
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.wallet.errors import (
    InclusionTimeout, InsufficientBalance, NodeUnreachable, ProofInvalid, QueryFailed, RpcError, TxRejected,
)
from trolly.wallet.nonces import NonceCache
from trolly.wallet.proofs import prove_answer
from trolly.wallet.rpc import AsyncRpcClient, RpcClient, normalize_node_url
from trolly.wallet.sender import TxSender, fetch_account
from trolly.wallet.txbuilder import send_message

from wallet_helpers import CHAIN_ID, DEV_BALANCE, FakeNode, dev_app_state, fake_node  # noqa: F401  (fixture)

DEV = dev_key(0)
DEV_ADDRESS = encode_address(DEV.address)
BOB = dev_key(5)
BOB_ADDRESS = encode_address(BOB.address)


def test_node_urls_in_cometbft_form_are_accepted():
    assert normalize_node_url("tcp://127.0.0.1:26657") == "http://127.0.0.1:26657"
    assert normalize_node_url("127.0.0.1:1234/") == "http://127.0.0.1:1234"
    assert normalize_node_url("https://node.example:443") == "https://node.example:443"


def test_unreachable_node_names_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with RpcClient(url, timeout=2) as client, pytest.raises(NodeUnreachable, match=url):
        client.status()


def test_server_that_is_not_json_rpc_gives_an_rpc_error():
    async def scenario():
        app = web.Application()
        async def html(request):
            return web.Response(text="<html>hello</html>", status=200)

        app.router.add_post("/", html)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with AsyncRpcClient(f"http://127.0.0.1:{port}") as client:
                with pytest.raises(RpcError, match="not JSON"):
                    await client.status()
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_status_query_and_errors(fake_node):
    with RpcClient(fake_node.url) as client:
        status = client.status()
        assert status.chain_id == CHAIN_ID and status.latest_block_height >= 1
        account = client.query_json(f"/account/{DEV_ADDRESS}")
        assert account == {"address": DEV_ADDRESS, "balance": DEV_BALANCE, "nonce": 0, "pub_key": None}
        with pytest.raises(QueryFailed, match="code 15"):
            client.query_json("/no/such/path")
        with pytest.raises(RpcError, match="Method not found"):
            client.call("no_such_method")
        assert client.find_tx("AB" * 32) is None


def test_broadcast_rejection_is_typed_with_code_and_log(fake_node):
    bad_chain = build_tx(DEV, "another-chain", 0, 0, [MsgSend(to=BOB.address, amount=1)])
    with RpcClient(fake_node.url) as client, pytest.raises(TxRejected) as caught:
        client.broadcast_tx_sync(bad_chain)
    assert caught.value.code == 4 and "another-chain" in caught.value.log


def test_inclusion_timeout_when_no_block_comes(fake_node):
    fake_node.producing = False
    raw = build_tx(DEV, CHAIN_ID, 0, 0, [MsgSend(to=BOB.address, amount=1)])
    with RpcClient(fake_node.url) as client:
        accepted = client.broadcast_tx_sync(raw)
        with pytest.raises(InclusionTimeout, match=accepted.hash):
            client.wait_for_tx(accepted.hash, timeout=0.5)
        fake_node.producing = True
        included = client.wait_for_tx(accepted.hash, timeout=5)
    assert included.height >= 2 and included.code == 0


def test_two_quick_sends_both_succeed_while_the_node_lags(fake_node, tmp_path):
    fake_node.producing = False  # the node's committed nonce stays 0 until both are in the mempool
    with RpcClient(fake_node.url) as client:
        sender = TxSender(client.async_client, NonceCache(tmp_path))
        first = client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 5)]))
        client.run(sender.send(DEV, first, wait=False))
        second = client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 7)]))
        assert (first.nonce, second.nonce) == (0, 1)
        sent = client.run(sender.send(DEV, second, wait=False))
        fake_node.producing = True
        assert client.wait_for_tx(sent.hash, timeout=5).code == 0
    assert fake_node.account(BOB.address).balance == 12
    assert fake_node.account(DEV.address).nonce == 2


def test_stale_remembered_nonce_is_forgotten_and_the_tx_resigned(fake_node, tmp_path):
    cache = NonceCache(tmp_path)
    cache.remember(DEV_ADDRESS, 9)  # as if nine earlier transactions had been dropped from the mempool
    with RpcClient(fake_node.url) as client:
        sender = TxSender(client.async_client, cache)
        plan = client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 3)]))
        assert plan.nonce == 9
        outcome = client.run(sender.send(DEV, plan, timeout=5))
    assert outcome.nonce == 0 and outcome.included.code == 0
    assert fake_node.account(BOB.address).balance == 3


def test_insufficient_funds_is_caught_before_signing(fake_node, tmp_path):
    with RpcClient(fake_node.url) as client:
        sender = TxSender(client.async_client, NonceCache(tmp_path))
        with pytest.raises(InsufficientBalance, match="insufficient funds"):
            client.run(sender.plan(BOB_ADDRESS, [send_message(DEV.address, 1)]))
        # and reported the same way when CheckTx finds it (planning skipped the check)
        plan = client.run(sender.plan(BOB_ADDRESS, [send_message(DEV.address, 1)], check_funds=False))
        with pytest.raises(InsufficientBalance, match="CheckTx"):
            client.run(sender.send(BOB, plan))
    assert fake_node.account(DEV.address).balance == DEV_BALANCE


def test_message_refused_by_check_tx_is_typed_and_charges_nothing(fake_node, tmp_path):
    from trolly.wallet.txbuilder import bond_message

    with RpcClient(fake_node.url) as client:
        sender = TxSender(client.async_client, NonceCache(tmp_path))
        send_to_bob = client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 10**6)]))
        client.run(sender.send(DEV, send_to_bob, timeout=5))
        plan = client.run(sender.plan(BOB_ADDRESS, [bond_message(1000)], 1))  # bob runs no validator
        with pytest.raises(TxRejected) as caught:
            client.run(sender.send(BOB, plan, timeout=5))
    assert caught.value.codespace == "staking" and "no validator" in caught.value.log
    assert caught.value.height == 0  # refused at the door: never in a block
    assert fake_node.account(BOB.address).balance == 10**6


def test_message_failing_in_the_block_raises_with_height_and_charges_the_fee(fake_node, tmp_path):
    from trolly.wallet.txbuilder import bond_message

    with RpcClient(fake_node.url) as client:
        sender = TxSender(client.async_client, NonceCache(tmp_path))
        client.run(sender.send(DEV, client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 10**6)]))))
        fake_node.skip_check_tx = True
        plan = client.run(sender.plan(BOB_ADDRESS, [bond_message(1000)], 1))
        with pytest.raises(TxRejected) as caught:
            client.run(sender.send(BOB, plan, timeout=5))
    assert caught.value.height >= 2 and "no validator" in caught.value.log
    assert fake_node.account(BOB.address).balance == 10**6 - 1  # the fee was charged all the same


def test_account_proof_verifies_against_the_next_header(fake_node):
    with RpcClient(fake_node.url) as client:
        proven = client.run(prove_answer(client.async_client, f"/account/{DEV_ADDRESS}"))
        assert proven.answer["balance"] == DEV_BALANCE and proven.header_height == proven.height + 1
        assert proven.app_hash == fake_node.app_hashes[proven.height] and proven.present
        absent = client.run(prove_answer(client.async_client, f"/account/{BOB_ADDRESS}"))  # never funded
        assert absent.answer["balance"] == 0 and not absent.present


def test_account_proof_fails_when_the_header_disagrees(fake_node):
    fake_node.tamper_app_hash = True
    with RpcClient(fake_node.url) as client, pytest.raises(ProofInvalid, match="does NOT match"):
        client.run(prove_answer(client.async_client, f"/account/{DEV_ADDRESS}"))


def test_fetch_account_refuses_a_bad_address_before_the_network():
    async def scenario():
        async with AsyncRpcClient(f"http://127.0.0.1:{free_port()}") as client:
            await fetch_account(client, DEV_ADDRESS[:-1] + ("q" if DEV_ADDRESS[-1] != "q" else "p"))

    from trolly.wallet.errors import InvalidAddressText

    with pytest.raises(InvalidAddressText, match="checksum"):
        asyncio.run(scenario())


def test_nonce_memory_expires_and_never_goes_below_the_node(tmp_path):
    from trolly.wallet.nonces import MemoryNonceCache

    for cache in (NonceCache(tmp_path, ttl_seconds=10), MemoryNonceCache(ttl_seconds=10)):
        cache.remember(DEV_ADDRESS, 5, now=100.0)
        assert cache.next_nonce(DEV_ADDRESS, 3, now=105.0) == 5
        assert cache.next_nonce(DEV_ADDRESS, 7, now=105.0) == 7  # the node moved past it
        assert cache.next_nonce(DEV_ADDRESS, 3, now=111.0) == 3  # expired
        assert cache.next_nonce(BOB_ADDRESS, 2, now=105.0) == 2
        cache.forget(DEV_ADDRESS)
        assert cache.next_nonce(DEV_ADDRESS, 3, now=105.0) == 3


def test_describe_tx_shows_every_message_kind_and_survives_garbage():
    from trolly.chain.proto.market_pb2 import MsgJoinTask, MsgSubmitTask
    from trolly.wallet.errors import WalletError
    from trolly.wallet.txbuilder import describe_tx

    raw = build_tx(DEV, CHAIN_ID, 3, 10, [MsgSend(to=BOB.address, amount=4), MsgJoinTask(task_id=9),
                                          MsgSubmitTask(spec=b"{}", budget=1000)])
    described = describe_tx(raw)
    assert described["signer"] == DEV_ADDRESS and described["nonce"] == 3 and described["fee"] == 10
    assert [m["fields"] for m in described["messages"][:2]] == [{"to": BOB_ADDRESS, "amount": 4}, {"task_id": "9"}]
    assert described["total_spend"] == 10 + 4 + 1000  # the task budget is escrowed from the signer
    with pytest.raises(WalletError, match="not a Trolly transaction"):
        describe_tx(b"\xff\x00garbage")


def test_account_proof_holds_only_for_the_exact_balance_and_nonce():
    from trolly.chain.accounts import Account, encode_account
    from trolly.chain.keys import account_key
    from wallet_helpers import account_proof_holds
    from trolly.chain.sparse_merkle import MemoryTree

    items = {account_key(DEV.address): encode_account(Account(500, 2)), b"\x03": b"supply"}
    root = MemoryTree(items).root()
    assert account_proof_holds(items, root, DEV_ADDRESS, 500, 2)
    assert not account_proof_holds(items, root, DEV_ADDRESS, 501, 2)  # a node lying about the balance
    assert not account_proof_holds(items, root, DEV_ADDRESS, 500, 1)
    assert not account_proof_holds(items, bytes(32), DEV_ADDRESS, 500, 2)
    assert account_proof_holds(items, root, BOB_ADDRESS, 0, 0)  # never funded: proven absent
    assert not account_proof_holds(items, root, BOB_ADDRESS, 1, 0)


def test_plans_made_before_sending_get_consecutive_nonces_and_unsent_ones_are_given_back(fake_node, tmp_path):
    cache = NonceCache(tmp_path)

    async def scenario(client):
        sender = TxSender(client, cache)
        # a service doing two things at once: both plans are made before either is broadcast
        first, second = await asyncio.gather(
            sender.plan(DEV_ADDRESS, [send_message(BOB.address, 1)]),
            sender.plan(DEV_ADDRESS, [send_message(BOB.address, 2)]),
        )
        assert sorted([first.nonce, second.nonce]) == [0, 1]
        third = await sender.plan(DEV_ADDRESS, [send_message(BOB.address, 3)])
        sender.release(DEV_ADDRESS, third)  # not sent after all: nonce 2 is free again
        dry = await sender.plan(DEV_ADDRESS, [send_message(BOB.address, 4)], reserve=False)
        assert third.nonce == dry.nonce == 2
        outcomes = await asyncio.gather(sender.send(DEV, second, timeout=5), sender.send(DEV, first, timeout=5))
        assert all(o.included.code == 0 for o in outcomes)
        with pytest.raises(InsufficientBalance):  # a refused plan reserves nothing
            await sender.plan(BOB_ADDRESS, [send_message(DEV.address, 10**9)])
        assert cache.next_nonce(BOB_ADDRESS, 0) == 0
        return await sender.plan(DEV_ADDRESS, [send_message(BOB.address, 5)])

    async def run():
        async with AsyncRpcClient(fake_node.url) as client:
            return await scenario(client)

    assert asyncio.run(run()).nonce == 2
    assert fake_node.account(BOB.address).balance == 3


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_describe_tx_on_arbitrary_bytes_raises_only_wallet_errors(raw):
    from trolly.wallet.errors import WalletError
    from trolly.wallet.txbuilder import describe_tx

    try:
        described = describe_tx(raw)
    except WalletError:
        return
    assert set(described) >= {"hash", "signer", "nonce", "fee", "messages", "total_spend"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["/trolly.bank.v1.MsgSend", "/trolly.staking.v1.MsgCreateValidator",
                                           "/trolly.market.v1.MsgSubmitTask", "/trolly.market.v1.MsgJoinTask",
                                           "/no.such.Msg"]), st.binary(max_size=80)), max_size=4))
def test_describe_tx_survives_garbage_inside_a_valid_envelope(messages):
    from trolly.chain.proto import tx_pb2
    from trolly.wallet.txbuilder import describe_tx

    body = tx_pb2.TxBody(chain_id=CHAIN_ID, nonce=1, fee=2)
    for type_url, value in messages:
        body.messages.add(type_url=type_url, value=value)
    raw = tx_pb2.Tx(body_bytes=body.SerializeToString(), pubkey=DEV.pubkey, signature=bytes(64)).SerializeToString()
    described = describe_tx(raw)
    assert [m["type"] for m in described["messages"]] == [t for t, _ in messages]
    assert described["total_spend"] >= 2


def test_a_plan_without_a_fee_pays_exactly_the_chains_minimum_for_its_size(tmp_path):
    """On a chain with the default fee params the sender prices a transaction by its bytes: a task spec costs
    more than a send, the chain accepts the computed fee, and one utrl less is refused."""
    node = FakeNode(dev_app_state({"staking": {}})).start()
    try:
        with RpcClient(node.url) as client:
            sender = TxSender(client.async_client, NonceCache(tmp_path))
            auth = client.query_json("/params/auth")
            assert auth["min_fee"] > 0 and auth["fee_per_byte"] > 0  # the default genesis charges
            small = client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 5)], reserve=False))
            large = client.run(sender.plan(DEV_ADDRESS, [send_message(BOB.address, 5)], memo="m" * 200,
                                           reserve=False))
            for plan in (small, large):
                assert plan.fee == auth["min_fee"] + auth["fee_per_byte"] * len(plan.sign(DEV))
            assert large.fee - small.fee >= 200 * auth["fee_per_byte"]
            short_by_one = small.with_fee(small.fee - 1)
            with pytest.raises(TxRejected, match="below the minimum"):
                client.run(sender.send(DEV, short_by_one, wait=False))
            sent = client.run(sender.send(DEV, small))
            assert sent.included.code == 0
    finally:
        node.stop()


def test_a_query_on_a_kept_alive_connection_the_node_dropped_is_sent_again_once_and_a_broadcast_is_not():
    """The node reads a request on a reused connection and closes it unanswered (as when its keep-alive timer
    fires just as the client sends): a query goes again on a fresh connection; a broadcast, which may have
    arrived, fails as NodeUnreachable instead of being sent twice."""
    import asyncio
    import json

    from trolly.wallet.errors import NodeUnreachable
    from trolly.wallet.rpc import AsyncRpcClient

    answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}).encode()

    async def serve(reader, writer):
        served = 0
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            if served == 1:  # the second request on this connection: dropped unanswered
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(answer), answer))
            await writer.drain()
            served += 1

    async def scenario():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, AsyncRpcClient(url) as client:
            assert await client.call("status") == {"ok": True}
            assert await client.call("status") == {"ok": True}  # dropped, then sent again on a new connection
            await client.call("status")
            with pytest.raises(NodeUnreachable):
                await client.call("broadcast_tx_sync", tx="AA==")

    asyncio.run(scenario())
