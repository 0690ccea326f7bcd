"""FinalizeBlock leaves the signature checker process alone when the node already checked the block's signatures
(in CheckTx, as a validator does for transactions that reached its mempool), and uses it otherwise."""

from __future__ import annotations

import pytest

from trolly.abci_app import signature_checker
from trolly.abci_app.signature_checker import MIN_BATCH, execute_block
from trolly.chain import crypto
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.signature_cache import VerifiedSignatures
from trolly.chain.state import State
from trolly.chain.tx import build_tx, signed_payloads

from chain_helpers import CHAIN_ID, Chain


def sends(chain: Chain, count: int, amount: int) -> list[bytes]:
    """`count` valid sends, each from its own account (nonce 0), so every one succeeds."""
    recipient = chain.accounts[0].address
    return [build_tx(chain.accounts[index], CHAIN_ID, 0, 1, [MsgSend(to=recipient, amount=amount)])
            for index in range(1, count + 1)]


@pytest.fixture
def batches_started(monkeypatch):
    """Records every block handed to the helper (and checks on the spot instead of starting a process)."""
    started: list[int] = []

    def record(txs):
        started.append(len(txs))
        return None

    monkeypatch.setattr(signature_checker._CHECKER, "start_batch", record)
    return started


def execute(chain: Chain, txs: list[bytes]) -> list[int]:
    output = execute_block(State(chain.kv), chain.env(chain.height + 1), txs)
    return [result.code for result in output.tx_results]


def test_a_block_whose_signatures_were_all_checked_before_is_not_sent_to_the_helper(batches_started):
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=5)
    for payload in signed_payloads(txs):  # what CheckTx does when the transactions arrive
        assert crypto.verify_signature(*payload)
    assert execute(chain, txs) == [0] * len(txs)
    assert batches_started == []


def test_a_block_with_enough_unchecked_signatures_still_goes_to_the_helper(batches_started):
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=7)
    assert execute(chain, txs) == [0] * len(txs)
    assert batches_started == [len(txs)]


def test_a_forged_signature_is_never_taken_as_remembered(batches_started):
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=9)
    for payload in signed_payloads(txs):
        assert crypto.verify_signature(*payload)
    forged = txs[0][:-1] + bytes([txs[0][-1] ^ 1])  # the signature is the envelope's last field
    codes = execute(chain, [forged] + txs[1:])
    assert codes[0] != 0 and codes[1:] == [0] * (len(txs) - 1)


def test_remembers_only_checks_that_succeeded():
    calls = []

    def check(pubkey, message, signature):
        calls.append(message)
        return signature == b"good"

    memo = VerifiedSignatures(check)
    assert not memo.remembers(b"k", b"m", b"good")
    assert memo.verify(b"k", b"m", b"good") and memo.remembers(b"k", b"m", b"good")
    assert not memo.verify(b"k", b"m", b"bad") and not memo.remembers(b"k", b"m", b"bad")
    assert not memo.remembers(b"k", b"other message", b"good")
    assert not memo.remembers(bytearray(b"k"), b"m", b"good")
    assert len(calls) == 2  # remembers checked nothing
