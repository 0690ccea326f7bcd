"""The browser worker's data key (console/web/src/browser_worker/data_key.js) in Node.js against Python: a box
sealed by the requester's own code (`wallet.box_proofs.seal_with_sender_proof`, what `wallet.key_delivery`
sends) and answered as the chain answers `/market/data_key/<task>/<address>` (`query_data_key` over a state
holding it) opens in JavaScript to the same key, checked against the task's `data_key_hash`; a box for another
recipient, a key the task did not commit to and a box not delivered yet are told apart."""

from __future__ import annotations

import pytest

from bw_data_helpers import AVAILABLE, SKIP_REASON, run_script
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.market.data_keys import box_context, data_key_hash, put_key_box
from trolly.chain.market.queries import query_data_key
from trolly.chain.market.records import KeyBox
from trolly.chain.state import MemoryKV, State
from trolly.wallet.box_proofs import seal_with_sender_proof

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=SKIP_REASON)

TASK = 7
WORKER = PrivateKey(bytes(range(32)))
OTHER = PrivateKey(bytes(range(100, 132)))
DATA_KEY = bytes(range(200, 232))


def chain_answers(sealed: bytes, recipient: PrivateKey, committed: bytes = DATA_KEY) -> dict:
    """The chain's answers for a box `sealed` delivered to `recipient`, and the task committed to `committed`."""
    state = State(MemoryKV())
    put_key_box(state, TASK, recipient.address, KeyBox(sealed=sealed, delivered_height=12))
    address = encode_address(recipient.address)
    box = query_data_key(state, f"{TASK}/{address}", b"").value
    return {f"/market/data_key/{TASK}/{address}": box,
            f"/market/task/{TASK}": {"id": TASK, "data_key_hash": data_key_hash(committed).hex()}}


def open_as(worker: PrivateKey, answers: dict, **extra) -> dict:
    return run_script("open_data_key.mjs", {"answers": answers, "taskId": TASK, "seed": worker.seed.hex(),
                                            "address": encode_address(worker.address), **extra})


def sealed_to(recipient: PrivateKey, key: bytes = DATA_KEY) -> bytes:
    return seal_with_sender_proof(key, recipient.pubkey, box_context(TASK))[0]


def test_a_box_sealed_by_the_requester_opens_to_the_same_key():
    opened = open_as(WORKER, chain_answers(sealed_to(WORKER), WORKER), hashOf=DATA_KEY.hex())
    assert opened == {"ok": True, "key": DATA_KEY.hex(), "hash": data_key_hash(DATA_KEY).hex()}


def test_the_committed_hash_may_be_passed_instead_of_read():
    answers = chain_answers(sealed_to(WORKER), WORKER)
    del answers[f"/market/task/{TASK}"]
    opened = open_as(WORKER, answers, committedHash=data_key_hash(DATA_KEY).hex())
    assert opened["ok"] and opened["key"] == DATA_KEY.hex()


def test_a_box_not_delivered_yet_is_null():
    assert open_as(WORKER, {}) == {"ok": True, "key": None, "hash": None}


def test_a_box_sealed_to_another_recipient_is_a_bad_key():
    """Attack: the requester files under this worker's address a box only another account opens: the worker
    learns nothing and says why (a BadDataKey, which the chain would take a report on)."""
    opened = open_as(WORKER, chain_answers(sealed_to(OTHER), WORKER))
    assert opened["error"] == "BadDataKey"
    assert opened["message"] == (f"task {TASK}: the sealed data key does not open with this key: it was sealed to "
                                 f"another member")


def test_a_box_holding_another_key_than_the_committed_one_is_a_bad_key():
    """Attack: the requester seals a key other than the one its task committed to (so that the worker trains
    on nothing, or on other data): the hash check refuses it."""
    opened = open_as(WORKER, chain_answers(sealed_to(WORKER, bytes(32)), WORKER))
    assert opened["error"] == "BadDataKey"
    assert opened["message"] == f"task {TASK}: the box holds another key than the one the task committed to"


def test_a_box_of_the_wrong_length_is_a_bad_key():
    opened = open_as(WORKER, chain_answers(sealed_to(WORKER)[:-1], WORKER))
    assert opened["error"] == "BadDataKey" and "a sealed data key is 80 bytes, got 79" in opened["message"]
