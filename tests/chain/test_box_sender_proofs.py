"""A sender's proof of its sealed box's ephemeral secret, which keeps a recipient's complaint from leaking.

The attack (issue 32 item 3, the complaint's own hole): a complaint reveals S = a*P for the ephemeral point P of
the box complained about. A hostile requester that makes P a known multiple of another requester's ephemeral
point to the same worker, and delivers junk under it, reads the other task's key from the worker's honest
complaint. A delivery that must carry the sender's proof of P's discrete logarithm refuses such a box.
"""

from __future__ import annotations

import hashlib

import nacl.bindings as sodium
import nacl.public
import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trolly.chain.box_proofs import FIELD_PRIME, GROUP_ORDER, check_box_complaint, edwards_lift, shared_secret
from trolly.chain.box_sender_proofs import SENDER_PROOF_BYTES, check_sender_proof
from trolly.chain.errors import InvalidBoxProof
from trolly.chain.hsalsa20 import hsalsa20
from trolly.compute.data.encryption import open_data_key
from trolly.wallet.box_proofs import prove_box_opening, seal_with_sender_proof

SETTINGS = settings(max_examples=30, deadline=None)
seeds = st.binary(min_size=32, max_size=32)
data_keys = st.binary(min_size=32, max_size=32)
TASK = b"task 1"


def public_key(seed: bytes) -> bytes:
    return bytes(nacl.signing.SigningKey(seed).verify_key)


def montgomery_u(point: bytes) -> bytes:
    y = int.from_bytes(point, "little") & (2**255 - 1)
    return ((1 + y) * pow(1 - y, FIELD_PRIME - 2, FIELD_PRIME) % FIELD_PRIME).to_bytes(32, "little")


@SETTINGS
@given(seeds, data_keys)
def test_a_box_sealed_with_a_sender_proof_is_an_ordinary_sealed_box_whose_proof_verifies(seed, key):
    box, proof = seal_with_sender_proof(key, public_key(seed), TASK)
    assert len(proof) == SENDER_PROOF_BYTES
    check_sender_proof(public_key(seed), box, TASK, proof)
    assert open_data_key(box, nacl.signing.SigningKey(seed)) == key
    assert check_box_complaint(public_key(seed), box, prove_box_opening(seed, box)) == key


@SETTINGS
@given(seeds, data_keys, st.integers(min_value=2, max_value=GROUP_ORDER - 1))
def test_a_junk_box_on_a_multiple_of_another_boxs_ephemeral_point_has_no_sender_proof(seed, key, multiple):
    """Attack: requester 2 delivers junk under m*P1, P1 the ephemeral point of requester 1's box to the same
    worker. The worker's honest complaint reveals a*m*P1, so requester 2 reads requester 1's key; the sender
    proof the delivery requires is what refuses the box before any complaint."""
    worker = public_key(seed)
    first_box, first_proof = seal_with_sender_proof(key, worker, TASK)
    scalar = multiple.to_bytes(32, "little")
    hostile_point = sodium.crypto_scalarmult_ed25519_noclamp(scalar, edwards_lift(int.from_bytes(first_box[:32],
                                                                                                  "little")))
    hostile_box = montgomery_u(hostile_point) + bytes(48)

    complaint = prove_box_opening(seed, hostile_box)  # the box is junk, and the worker honestly says so
    assert check_box_complaint(worker, hostile_box, complaint) is None
    inverse = sodium.crypto_core_ed25519_scalar_invert(scalar)
    their_secret = sodium.crypto_scalarmult_ed25519_noclamp(inverse, complaint[:32])
    recipient_x25519 = sodium.crypto_sign_ed25519_pk_to_curve25519(worker)
    nonce = hashlib.blake2b(first_box[:32] + recipient_x25519, digest_size=24).digest()
    leaked = sodium.crypto_box_open_easy_afternm(first_box[32:], nonce, hsalsa20(shared_secret(their_secret)))
    assert leaked == key  # why the delivery must carry the sender's proof

    for proof in (first_proof, bytes(SENDER_PROOF_BYTES), hashlib.sha512(hostile_box).digest()):
        with pytest.raises(InvalidBoxProof):
            check_sender_proof(worker, hostile_box, b"task 2", proof)


@SETTINGS
@given(seeds, seeds, data_keys)
def test_a_sender_proof_is_not_copied_to_another_task_recipient_or_box(seed, other_seed, key):
    """Attack: a requester copies another's box and proof into its own task, or onto another recipient, or
    changes the box under a proof."""
    box, proof = seal_with_sender_proof(key, public_key(seed), TASK)
    with pytest.raises(InvalidBoxProof):
        check_sender_proof(public_key(seed), box, b"task 2", proof)
    if seed != other_seed:
        with pytest.raises(InvalidBoxProof):
            check_sender_proof(public_key(other_seed), box, TASK, proof)
    changed = box[:50] + bytes([box[50] ^ 1]) + box[51:]
    with pytest.raises(InvalidBoxProof):
        check_sender_proof(public_key(seed), changed, TASK, proof)


@SETTINGS
@given(seeds, data_keys, st.integers(min_value=0, max_value=SENDER_PROOF_BYTES * 8 - 1))
def test_a_sender_proof_with_any_bit_flipped_is_refused(seed, key, bit):
    box, proof = seal_with_sender_proof(key, public_key(seed), TASK)
    flipped = bytearray(proof)
    flipped[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(InvalidBoxProof):
        check_sender_proof(public_key(seed), box, TASK, bytes(flipped))


def test_an_ephemeral_key_outside_the_prime_order_subgroup_has_no_sender_proof():
    """A non-canonical u, a u on the twist, a small-order or torsioned point: no honest X25519 key is any of
    these, so the delivery refuses them (the complaint check reads them as libsodium does)."""
    seed = hashlib.sha256(b"recipient").digest()
    box, proof = seal_with_sender_proof(bytes(32), public_key(seed), TASK)
    order_eight = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
    torsioned = sodium.crypto_core_ed25519_add(edwards_lift(int.from_bytes(box[:32], "little")), order_eight)
    top_bit = box[:31] + bytes([box[31] | 0x80])
    for ephemeral in (top_bit, (2).to_bytes(32, "little"), bytes(32), montgomery_u(torsioned)):
        with pytest.raises(InvalidBoxProof):
            check_sender_proof(public_key(seed), ephemeral + box[32:], TASK, proof)
    for length in (79, 81):
        with pytest.raises(InvalidBoxProof):
            check_sender_proof(public_key(seed), (box * 2)[:length], TASK, proof)
    with pytest.raises(InvalidBoxProof):
        check_sender_proof(public_key(seed), box, TASK, proof[:-1])


def test_the_sealed_box_opens_with_pynacl_sealedbox():
    seed = hashlib.sha256(b"recipient").digest()
    box, _ = seal_with_sender_proof(b"k" * 32, public_key(seed), TASK)
    opened = nacl.public.SealedBox(nacl.signing.SigningKey(seed).to_curve25519_private_key()).decrypt(box)
    assert opened == b"k" * 32
