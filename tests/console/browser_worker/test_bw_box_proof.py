"""The browser worker's bad-key proof (console/web/src/browser_worker/box_proof.js) in Node.js against Python: for
boxes sealed by the requester's code to a tab's key (holding the committed key, another key, or sealed to another
account), junk boxes and boxes whose ephemeral key is no usable point, the proof made in JavaScript is the bytes
`wallet.box_proofs.prove_box_opening` makes; the chain's check (`chain.box_proofs.check_box_complaint`) accepts it
and opens the box with it as the tab's key would; a proof with any part changed is refused."""

from __future__ import annotations

import hashlib

import pytest

from bw_data_helpers import AVAILABLE, SKIP_REASON, run_script
from trolly.chain.box_proofs import InvalidBoxProof, check_box_complaint
from trolly.chain.crypto import PrivateKey
from trolly.chain.market.data_keys import box_context
from trolly.wallet.box_proofs import prove_box_opening, seal_with_sender_proof

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=SKIP_REASON)

TAB = PrivateKey(bytes(range(32)))
OTHER = PrivateKey(bytes(range(100, 132)))
DATA_KEY = bytes(range(200, 232))


def sealed(recipient: PrivateKey, key: bytes = DATA_KEY, task: int = 7) -> bytes:
    return seal_with_sender_proof(key, recipient.pubkey, box_context(task))[0]


def junk(label: str, length: int = 80) -> bytes:
    return (hashlib.sha512(label.encode()).digest() * 2)[:length]


def prove_in_js(cases: list[tuple[PrivateKey, bytes]]) -> list[bytes]:
    answer = run_script("prove_box.mjs", {"cases": [{"seed": key.seed.hex(), "box": box.hex()} for key, box in cases]})
    return [bytes.fromhex(proof) for proof in answer["proofs"]]


def test_proofs_made_in_javascript_are_pythons_bytes_and_the_chain_opens_the_box_with_them():
    boxes = {"the committed key": sealed(TAB), "another key": sealed(TAB, bytes(32)),
             "sealed to another account": sealed(OTHER), "junk": junk("junk"), **{
                 f"junk {i}": junk(f"junk {i}") for i in range(12)}}  # some ephemeral keys lie on the twist
    seeds = [TAB, PrivateKey(hashlib.sha256(b"second tab").digest())]
    cases = [(key, box) for key in seeds for box in boxes.values()]
    js_proofs = prove_in_js(cases)
    unreadable = 0
    for (key, box), proof in zip(cases, js_proofs):
        assert proof == prove_box_opening(key.seed, box)
        opened = check_box_complaint(key.pubkey, box, proof)  # raises InvalidBoxProof for a bad proof
        if proof == bytes(96):
            unreadable += 1  # a box nothing opens: the chain reads no proof
            assert opened is None
    assert unreadable > 0 and unreadable < len(cases)  # both kinds of junk were tried
    by_box = dict(zip(((key.seed, box) for key, box in cases), js_proofs))
    assert check_box_complaint(TAB.pubkey, boxes["the committed key"], by_box[TAB.seed, boxes["the committed key"]]) \
        == DATA_KEY  # the chain sees the committed key: it refuses such a report (KeyBoxGood)
    assert check_box_complaint(TAB.pubkey, boxes["another key"], by_box[TAB.seed, boxes["another key"]]) == bytes(32)
    assert check_box_complaint(TAB.pubkey, boxes["sealed to another account"],
                               by_box[TAB.seed, boxes["sealed to another account"]]) is None


@pytest.mark.parametrize("part", [slice(0, 32), slice(32, 64), slice(64, 96)], ids=["shared", "challenge", "response"])
def test_a_javascript_proof_with_a_part_changed_is_refused_by_the_chain(part):
    """Attack: a tab (or anyone) sends a report whose proof does not hold for its key and box, e.g. to be released
    from a task whose box it opened: the chain's check refuses it."""
    box = sealed(TAB, bytes(32))
    proof = bytearray(prove_in_js([(TAB, box)])[0])
    proof[part.start] ^= 1
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(TAB.pubkey, box, bytes(proof))


def test_a_proof_for_another_key_does_not_verify():
    """Attack: a member reports with a proof made with another account's seed for its own box."""
    box = sealed(TAB, bytes(32))
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(TAB.pubkey, box, prove_in_js([(OTHER, box)])[0])
