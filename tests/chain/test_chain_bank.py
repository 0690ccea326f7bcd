"""Bank `send` and the ante checks every transaction goes through, as (pre, operation, post) vectors.

A failure in the ante (decoding, chain id, signature, message shape, nonce, fee) leaves the state exactly as
it was; a failure inside a message keeps the fee and the nonce but rolls back every message of the tx.
"""

from __future__ import annotations

import pytest

from chain_helpers import GENESIS_BALANCE, test_key
from trolly.chain.ante import FEE_COLLECTOR
from trolly.chain.codec import U64_MAX
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InsufficientFee, InsufficientFunds, InvalidAddress, InvalidAmount, InvalidNonce
from trolly.chain.errors import InvalidRequest, InvalidSignature, TxDecodeError, UnknownMessage, WrongChainId
from trolly.chain.proto import tx_pb2
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.tx import sign_bytes


def assert_fails(result, error: type) -> None:
    assert (result.code, result.codespace) == (error.code, error.codespace), result.log
    assert result.log


def signed_envelope(key, body: tx_pb2.TxBody) -> bytes:
    body_bytes = body.SerializeToString(deterministic=True)
    return tx_pb2.Tx(body_bytes=body_bytes, pubkey=key.pubkey, signature=key.sign(sign_bytes(body_bytes))).SerializeToString()


# -- success ------------------------------------------------------------------------------------------------------
def test_send_moves_the_amount_and_the_fee_reaches_the_validator(chain):
    alice, bob = chain.accounts[:2]
    operator = chain.operators[0]
    operator_before = chain.holdings(operator)
    result = chain.deliver(alice, MsgSend(to=bob.address, amount=1234), fee=56)
    assert result.ok, result.log
    assert chain.balance(alice) == GENESIS_BALANCE - 1234 - 56
    assert chain.balance(bob) == GENESIS_BALANCE + 1234
    assert chain.nonce(alice) == 1
    assert chain.balance(FEE_COLLECTOR) == 0  # paid out at the end of the block
    assert chain.holdings(operator) == operator_before + 56  # its commission, and the rest as its rewards
    assert ("transfer", (("sender", _bech(alice)), ("recipient", _bech(bob)), ("amount", "1234"))) in [
        (e.type, e.attributes) for e in result.events
    ]


def test_send_to_a_new_account_creates_it(chain):
    alice = chain.accounts[0]
    stranger = test_key("stranger")
    assert chain.deliver(alice, MsgSend(to=stranger.address, amount=7)).ok
    assert chain.query(f"/account/{_bech(stranger)}") == {"address": _bech(stranger), "balance": 7, "nonce": 0,
                                                          "pub_key": None}  # it has signed nothing yet


def test_several_txs_of_one_signer_in_one_block_take_consecutive_nonces(chain):
    alice, bob = chain.accounts[:2]
    output = chain.block(*(chain.tx(alice, MsgSend(to=bob.address, amount=1)) for _ in range(3)))
    assert [r.ok for r in output.tx_results] == [True, True, True]
    assert chain.nonce(alice) == 3 and chain.balance(bob) == GENESIS_BALANCE + 3


# -- ante failures: nothing changes -----------------------------------------------------------------------------
def _ante_failure_vectors():
    """(case, build(chain) -> raw tx, expected error). Each must leave the committed state untouched."""
    def send(chain, **kw):
        alice, bob = chain.accounts[:2]
        return chain.tx(alice, MsgSend(to=bob.address, amount=kw.pop("amount", 5)), **kw)

    def bad_signature(chain):
        envelope = tx_pb2.Tx.FromString(send(chain))
        envelope.signature = bytes([envelope.signature[0] ^ 1]) + envelope.signature[1:]
        return envelope.SerializeToString()

    def other_signer_pubkey(chain):
        envelope = tx_pb2.Tx.FromString(send(chain))
        envelope.pubkey = chain.accounts[2].pubkey
        return envelope.SerializeToString()

    def unknown_message(chain):
        body = tx_pb2.TxBody(chain_id=chain.chain_id, nonce=0, fee=1)
        body.messages.add(type_url="/trolly.nothing.v1.MsgNothing", value=b"")
        return signed_envelope(chain.accounts[0], body)

    def no_messages(chain):
        return signed_envelope(chain.accounts[0], tx_pb2.TxBody(chain_id=chain.chain_id, nonce=0, fee=1))

    def amount_beyond_64_bits(chain):
        body = tx_pb2.TxBody(chain_id=chain.chain_id, nonce=0, fee=1)
        # field 2 (amount) as an 11-byte varint: a value that does not fit in 64 bits
        body.messages.add(type_url="/trolly.bank.v1.MsgSend",
                          value=b"\x0a\x14" + chain.accounts[1].address + b"\x10" + b"\xff" * 10 + b"\x01")
        return signed_envelope(chain.accounts[0], body)

    return [
        ("empty tx", lambda c: b"", TxDecodeError),
        ("garbage bytes", lambda c: b"\xff\xff\xff", TxDecodeError),
        ("zero amount", lambda c: send(c, amount=0), InvalidAmount),
        ("amount beyond 64 bits", amount_beyond_64_bits, TxDecodeError),
        ("recipient of 19 bytes", lambda c: c.tx(c.accounts[0], MsgSend(to=b"\x01" * 19, amount=5)), InvalidAddress),
        ("recipient of 32 bytes", lambda c: c.tx(c.accounts[0], MsgSend(to=b"\x01" * 32, amount=5)), InvalidAddress),
        ("wrong chain id", lambda c: send(c, chain_id="other-chain"), WrongChainId),
        ("bad signature", bad_signature, InvalidSignature),
        ("signature of another key", other_signer_pubkey, InvalidSignature),
        ("unknown message type", unknown_message, UnknownMessage),
        ("no messages", no_messages, InvalidRequest),
        ("skipped nonce", lambda c: send(c, nonce=1), InvalidNonce),
        ("fee above the balance", lambda c: send(c, fee=GENESIS_BALANCE + 1), InsufficientFunds),
    ]


@pytest.mark.parametrize("case,build,error", _ante_failure_vectors(), ids=[v[0] for v in _ante_failure_vectors()])
def test_ante_failure_changes_nothing(chain, case, build, error):
    before = dict(chain.kv.items)
    result = chain.block(build(chain)).tx_results[0]
    assert_fails(result, error)
    assert chain.kv.items == before


def test_replayed_tx_is_rejected_and_changes_nothing(chain):
    alice, bob = chain.accounts[:2]
    raw = chain.tx(alice, MsgSend(to=bob.address, amount=5), fee=1)
    assert chain.block(raw).tx_results[0].ok
    before = dict(chain.kv.items)
    assert_fails(chain.block(raw).tx_results[0], InvalidNonce)
    assert chain.kv.items == before


def test_fee_below_the_minimum_is_rejected(make_chain):
    chain = make_chain(params={"auth": {"min_fee": 10, "fee_per_byte": 0}})
    alice, bob = chain.accounts[:2]
    before = dict(chain.kv.items)
    assert_fails(chain.deliver(alice, MsgSend(to=bob.address, amount=5), fee=9), InsufficientFee)
    assert chain.kv.items == before
    assert chain.deliver(alice, MsgSend(to=bob.address, amount=5), fee=10).ok


def test_the_minimum_fee_grows_with_the_transactions_bytes(make_chain):
    chain = make_chain(params={"auth": {"min_fee": 1000, "fee_per_byte": 10}})
    alice, bob = chain.accounts[:2]
    paid = []
    for memo in ("", "x" * 200):
        def signed(fee: int) -> bytes:
            return chain.tx(alice, MsgSend(to=bob.address, amount=5), fee=fee, nonce=chain.nonce(alice), memo=memo)

        fee = 0
        while fee < 1000 + 10 * len(signed(fee)):  # the fee is part of the bytes it pays for
            fee = 1000 + 10 * len(signed(fee))
        assert_fails(chain.block(signed(fee - 1)).tx_results[0], InsufficientFee)
        assert chain.block(signed(fee)).tx_results[0].ok
        paid.append(fee)
    assert paid[1] - paid[0] >= 200 * 10  # the memo's 200 bytes were paid for


# -- message failures: the fee stays charged --------------------------------------------------------------------
def test_send_fails_when_balance_too_low_but_fee_is_charged(chain):
    alice, bob = chain.accounts[:2]
    result = chain.deliver(alice, MsgSend(to=bob.address, amount=GENESIS_BALANCE), fee=3)
    assert_fails(result, InsufficientFunds)
    assert chain.balance(alice) == GENESIS_BALANCE - 3
    assert chain.balance(bob) == GENESIS_BALANCE
    assert chain.nonce(alice) == 1
    assert [e.type for e in result.events] == ["tx"]  # the fee event survives, the message's events do not


def test_send_of_u64_max_fails_with_insufficient_funds(chain):
    alice, bob = chain.accounts[:2]
    assert_fails(chain.deliver(alice, MsgSend(to=bob.address, amount=U64_MAX), fee=1), InsufficientFunds)
    assert chain.balance(alice) == GENESIS_BALANCE - 1


def test_second_message_failing_rolls_back_the_first_and_keeps_the_fee(chain):
    alice, bob, carol = chain.accounts[:3]
    result = chain.deliver(
        alice, MsgSend(to=bob.address, amount=100), MsgSend(to=carol.address, amount=GENESIS_BALANCE), fee=2
    )
    assert_fails(result, InsufficientFunds)
    assert chain.balance(alice) == GENESIS_BALANCE - 2
    assert chain.balance(bob) == GENESIS_BALANCE
    assert chain.balance(carol) == GENESIS_BALANCE
    assert chain.nonce(alice) == 1


def test_all_messages_of_a_tx_apply_when_all_succeed(chain):
    alice, bob, carol = chain.accounts[:3]
    assert chain.deliver(alice, MsgSend(to=bob.address, amount=100), MsgSend(to=carol.address, amount=200)).ok
    assert (chain.balance(bob), chain.balance(carol)) == (GENESIS_BALANCE + 100, GENESIS_BALANCE + 200)


def test_failed_tx_does_not_affect_the_next_one_in_the_block(chain):
    alice, bob = chain.accounts[:2]
    output = chain.block(
        chain.tx(alice, MsgSend(to=bob.address, amount=GENESIS_BALANCE * 2)),
        chain.tx(alice, MsgSend(to=bob.address, amount=10)),
    )
    assert [r.code for r in output.tx_results] == [InsufficientFunds.code, 0]
    assert chain.balance(bob) == GENESIS_BALANCE + 10 and chain.nonce(alice) == 2


def _bech(key) -> str:
    return encode_address(key.address)


def test_unknown_field_in_a_message_is_refused_as_non_canonical(chain):
    """Extra bytes inside a message (an unknown field) would be silently kept by protobuf: refuse them."""
    from trolly.chain.errors import TxDecodeError
    from trolly.chain.proto import tx_pb2
    from trolly.chain.tx import sign_bytes

    sender, recipient = chain.accounts[0], chain.accounts[1]
    value = MsgSend(to=recipient.address, amount=5).SerializeToString() + b"\x78\x01"  # field 15 = 1
    body = tx_pb2.TxBody(chain_id=chain.chain_id, nonce=chain.nonce(sender), fee=0)
    body.messages.add(type_url="/trolly.bank.v1.MsgSend", value=value)
    body_bytes = body.SerializeToString(deterministic=True)
    raw = tx_pb2.Tx(body_bytes=body_bytes, pubkey=sender.pubkey,
                    signature=sender.sign(sign_bytes(body_bytes))).SerializeToString(deterministic=True)
    before = chain.balance(recipient.address)
    result = chain.block(raw).tx_results[0]
    assert result.code == TxDecodeError.code and "canonical" in result.log
    assert chain.balance(recipient.address) == before
