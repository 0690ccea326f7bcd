"""`wallet.public_keys.find_public_key`: one account query, against a fake node running the real chain rules.

A key comes from genesis (an operator that never signs) or from the account's first signature; an account that
has neither has none, and a node that answers a key of another address is not believed."""

import base64

import pytest

from trolly.chain.accounts import Account, encode_account
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.keys import account_key
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.wallet.errors import WalletError
from trolly.wallet.proofs import prove_answer
from trolly.wallet.public_keys import find_public_key
from trolly.wallet.rpc import RpcClient
from trolly.wallet.sender import AccountState, TxSender, fetch_account

from wallet_helpers import FakeNode, dev_app_state

OPERATOR, BOB, CAROL = dev_key(0), dev_key(5), dev_key(6)


@pytest.fixture
def keyed_node():
    """The operator's key in genesis (it signs nothing here); Bob funded without one."""
    app_state = dev_app_state()
    app_state["accounts"][0]["pub_key"] = base64.b64encode(OPERATOR.pubkey).decode()
    app_state["accounts"].append({"address": encode_address(BOB.address), "balance": "1000000"})
    node = FakeNode(app_state).start()
    try:
        yield node
    finally:
        node.stop()


def test_an_operator_keyed_in_genesis_has_its_key_before_signing_anything(keyed_node):
    with RpcClient(keyed_node.url) as client:
        assert client.run(find_public_key(client.async_client, encode_address(OPERATOR.address))) == OPERATOR.pubkey
        assert client.run(fetch_account(client.async_client, encode_address(OPERATOR.address))).nonce == 0


def test_an_account_has_a_key_from_its_first_signature_and_none_before(keyed_node):
    bob = encode_address(BOB.address)
    with RpcClient(keyed_node.url) as client:
        assert client.run(find_public_key(client.async_client, bob)) is None
        assert client.run(find_public_key(client.async_client, encode_address(CAROL.address))) is None  # no account

        async def send():
            sender = TxSender(client.async_client)
            plan = await sender.plan(bob, [MsgSend(to=CAROL.address, amount=5)])
            await sender.send(BOB, plan, timeout=10)

        client.run(send())
        assert client.run(find_public_key(client.async_client, bob)) == BOB.pubkey
        proven = client.run(prove_answer(client.async_client, f"/account/{bob}"))  # the app hash commits to the key
        assert proven.answer["pub_key"] == base64.b64encode(BOB.pubkey).decode() and "pub_key" in proven.fields
        assert client.run(find_public_key(client.async_client, encode_address(CAROL.address))) is None


def test_a_key_answered_for_another_address_is_refused(keyed_node):
    """A node whose store was altered (the chain's rules never record such a key) answers Carol's key for Bob."""
    keyed_node.store.apply({account_key(BOB.address): encode_account(Account(1_000_000, 0, CAROL.pubkey))})
    with RpcClient(keyed_node.url) as client, pytest.raises(WalletError, match="not that account's key"):
        client.run(find_public_key(client.async_client, encode_address(BOB.address)))


def test_the_account_view_reads_what_it_writes():
    for state in (AccountState("trolly1x", 5, 2), AccountState("trolly1x", 0, 0, OPERATOR.pubkey)):
        assert AccountState.from_json(state.to_json()) == state
