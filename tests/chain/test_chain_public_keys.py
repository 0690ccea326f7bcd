"""An account's public key on chain: recorded from genesis or its first signature, never changed, queried.

A private task's data key is sealed to each bonded validator's operator; an operator that never signs a
transaction must still have a key others can read, so genesis carries it (`accounts[i].pub_key`)."""

from __future__ import annotations

import base64

import pytest

from trolly.chain.accounts import Account, decode_account, encode_account, get_account
from trolly.chain.app import init_chain
from trolly.chain.block import BlockEnv
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidRequest
from trolly.chain.keys import account_key
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.state import MemoryKV, State

from chain_helpers import GENESIS_BALANCE, Chain, genesis_app_state, test_key

OPERATOR, STRANGER = test_key("keyed-operator"), test_key("stranger")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def keyed_app_state(*entries: dict) -> dict:
    app_state = genesis_app_state([])
    app_state["accounts"] = list(entries)
    return app_state


def test_genesis_records_a_key_that_matches_its_address_and_the_query_returns_it():
    chain = Chain(app_state=keyed_app_state(
        {"address": encode_address(OPERATOR.address), "balance": "0", "pub_key": b64(OPERATOR.pubkey)}))
    assert get_account(chain.state, OPERATOR.address) == Account(0, 0, OPERATOR.pubkey)  # kept, though empty
    assert chain.query(f"/account/{encode_address(OPERATOR.address)}") == {
        "address": encode_address(OPERATOR.address), "balance": 0, "nonce": 0, "pub_key": b64(OPERATOR.pubkey)}


@pytest.mark.parametrize("pub_key, message", [
    (b64(STRANGER.pubkey), "is the key of " + encode_address(STRANGER.address)),
    (b64(OPERATOR.pubkey[:31]), "32-byte ed25519 key, got 31 bytes"),
    ("not base64!", "must be a base64 string"),
    (12, "must be a base64 string"),
])
def test_genesis_refuses_a_key_that_is_malformed_or_of_another_address(pub_key, message):
    state = State(MemoryKV())
    app_state = keyed_app_state({"address": encode_address(OPERATOR.address), "balance": "5", "pub_key": pub_key})
    with pytest.raises(InvalidRequest, match=message):
        init_chain(state, BlockEnv("c", 1, 0), app_state)


def test_genesis_refuses_an_unknown_account_field():
    app_state = keyed_app_state({"address": encode_address(OPERATOR.address), "balance": "5", "pubkey": "x"})
    with pytest.raises(InvalidRequest, match="unknown field.*pubkey"):
        init_chain(State(MemoryKV()), BlockEnv("c", 1, 0), app_state)


def test_the_first_signature_records_the_key_and_later_ones_never_change_it(chain):
    alice = chain.accounts[0]
    assert get_account(chain.state, alice.address).pub_key == b""  # funded in genesis without a key
    assert chain.deliver(alice, MsgSend(to=STRANGER.address, amount=7)).ok
    assert get_account(chain.state, alice.address) == Account(GENESIS_BALANCE - 7, 1, alice.pubkey)
    assert chain.query(f"/account/{encode_address(alice.address)}")["pub_key"] == b64(alice.pubkey)
    assert get_account(chain.state, STRANGER.address).pub_key == b""  # received, signed nothing
    assert chain.query(f"/account/{encode_address(STRANGER.address)}")["pub_key"] is None
    for _ in range(2):
        assert chain.deliver(alice, MsgSend(to=STRANGER.address, amount=1)).ok
    assert get_account(chain.state, alice.address) == Account(GENESIS_BALANCE - 9, 3, alice.pubkey)


def test_a_transaction_that_fails_its_ante_records_no_key(chain):
    bob = chain.accounts[1]
    result = chain.block(chain.tx(bob, MsgSend(to=STRANGER.address, amount=1), nonce=5)).tx_results[0]
    assert not result.ok and "nonce" in result.log
    assert get_account(chain.state, bob.address) == Account(GENESIS_BALANCE, 0)


def test_a_failing_message_keeps_the_key_the_ante_recorded(chain):
    """Fee and nonce stay charged when a message fails, and so does the key: the account did sign."""
    bob = chain.accounts[1]
    result = chain.deliver(bob, MsgSend(to=STRANGER.address, amount=GENESIS_BALANCE + 1))
    assert not result.ok
    assert get_account(chain.state, bob.address) == Account(GENESIS_BALANCE, 1, bob.pubkey)


def test_a_keyed_account_emptied_before_it_signs_keeps_its_key():
    chain = Chain(app_state=keyed_app_state(
        {"address": encode_address(OPERATOR.address), "balance": "9", "pub_key": b64(OPERATOR.pubkey)}))
    assert chain.deliver(OPERATOR, MsgSend(to=STRANGER.address, amount=9)).ok
    assert get_account(chain.state, OPERATOR.address) == Account(0, 1, OPERATOR.pubkey)


def test_the_stored_form_round_trips_with_and_without_a_key():
    for account in (Account(5, 2), Account(0, 0, OPERATOR.pubkey), Account(1, 9, OPERATOR.pubkey)):
        assert decode_account(encode_account(account)) == account
    assert len(encode_account(Account(5, 2))) == 16 and len(encode_account(Account(5, 2, OPERATOR.pubkey))) == 48


def test_an_account_proof_holds_only_for_the_key_the_chain_recorded():
    from wallet_helpers import account_proof_holds
    from trolly.chain.sparse_merkle import MemoryTree

    items = {account_key(OPERATOR.address): encode_account(Account(500, 2, OPERATOR.pubkey))}
    root = MemoryTree(items).root()
    address = encode_address(OPERATOR.address)
    assert account_proof_holds(items, root, address, 500, 2, OPERATOR.pubkey)
    assert not account_proof_holds(items, root, address, 500, 2)  # a node hiding the key
    assert not account_proof_holds(items, root, address, 500, 2, STRANGER.pubkey)  # or lying about it
