"""A recipient's complaint about its sealed data key (issue 32 item 3), checked without its secret key.

The attacks: a requester delivers a junk box and the worker, who cannot open it, must be able to show so; a
worker that can open its box claims it is junk to leave without penalty, by revealing a wrong shared secret
or another box's proof. The chain's verdict must be exactly what the recipient's libsodium sees.
"""

from __future__ import annotations

import hashlib

import nacl.bindings as sodium
import nacl.public
import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trolly.chain.box_proofs import (FIELD_PRIME, GROUP_ORDER, PROOF_BYTES, InvalidBoxProof, check_box_complaint,
                                     ephemeral_base, shared_secret)
from trolly.chain.errors import ChainError
from trolly.chain.hsalsa20 import hsalsa20
from trolly.compute.data.encryption import open_data_key, seal_data_key
from trolly.wallet.box_proofs import prove_box_opening

SETTINGS = settings(max_examples=40, deadline=None)
seeds = st.binary(min_size=32, max_size=32)
data_keys = st.binary(min_size=32, max_size=32)

SMALL_ORDER_U = [0, 1, FIELD_PRIME - 1, FIELD_PRIME, FIELD_PRIME + 1,
                 325606250916557431795983626356110631294008115727848805560023387167927233504,
                 39382357235489614581723060781553021112529911719440698176882885853963445705823]
"""libsodium's X25519 list of small-order u encodings (orders 1, 2, 4 and 8, and their non-canonical forms)."""


def public_key(seed: bytes) -> bytes:
    return bytes(nacl.signing.SigningKey(seed).verify_key)


def x25519_secret(seed: bytes) -> bytes:
    return bytes(nacl.signing.SigningKey(seed).to_curve25519_private_key())


def libsodium_opens(seed: bytes, box: bytes) -> bytes | None:
    """What the recipient's own wallet reads from the box (None when it does not open)."""
    try:
        return nacl.public.SealedBox(nacl.signing.SigningKey(seed).to_curve25519_private_key()).decrypt(box)
    except Exception:  # noqa: BLE001 - any refusal (bad point, bad tag) is "does not open"
        return None


def u_bytes(u: int) -> bytes:
    return u.to_bytes(32, "little")


def seal_with_ephemeral(key: bytes, recipient: bytes, ephemeral_secret: bytes, ephemeral_public: bytes) -> bytes:
    """A sealed box built by hand with a chosen ephemeral key encoding, as a hostile requester could."""
    recipient_x25519 = sodium.crypto_sign_ed25519_pk_to_curve25519(recipient)
    nonce = hashlib.blake2b(ephemeral_public + recipient_x25519, digest_size=24).digest()
    box_key = sodium.crypto_box_beforenm(recipient_x25519, ephemeral_secret)
    return ephemeral_public + sodium.crypto_box_easy_afternm(key, nonce, box_key)


def test_invalid_box_proof_is_a_chain_error_with_its_own_code():
    codes = {(cls.codespace, cls.code) for cls in ChainError.__subclasses__() if cls is not InvalidBoxProof}
    assert issubclass(InvalidBoxProof, ChainError)
    assert (InvalidBoxProof.codespace, InvalidBoxProof.code) not in codes


def test_hsalsa20_is_the_box_key_step_of_crypto_box_beforenm():
    for index in range(20):
        secret = hashlib.sha256(b"secret %d" % index).digest()
        peer = sodium.crypto_scalarmult_base(hashlib.sha256(b"peer %d" % index).digest())
        assert hsalsa20(sodium.crypto_scalarmult(secret, peer)) == sodium.crypto_box_beforenm(peer, secret)
    with pytest.raises(ValueError):
        hsalsa20(bytes(31))


@SETTINGS
@given(seeds, data_keys)
def test_a_good_box_is_opened_with_the_proven_secret_and_gives_the_exact_key(seed, key):
    """Attack: a worker that holds a good box claims it is junk. The proof opens it, so the claim fails."""
    box = seal_data_key(key, public_key(seed))
    proof = prove_box_opening(seed, box)
    assert len(proof) == PROOF_BYTES
    assert check_box_complaint(public_key(seed), box, proof) == key == open_data_key(box, nacl.signing.SigningKey(seed))


@SETTINGS
@given(seeds, st.binary(min_size=80, max_size=80))
def test_random_bytes_are_a_junk_box(seed, box):
    """Attack: a requester delivers 80 random bytes; the recipient's complaint shows they open to nothing."""
    proof = prove_box_opening(seed, box)
    assert len(proof) == PROOF_BYTES
    assert check_box_complaint(public_key(seed), box, proof) is None
    assert libsodium_opens(seed, box) is None


@SETTINGS
@given(seeds, seeds, data_keys)
def test_a_box_sealed_to_another_key_is_junk_to_this_recipient(seed, other_seed, key):
    """Attack: a requester seals the key to someone else and delivers that box to this worker."""
    box = seal_data_key(key, public_key(other_seed))
    if seed != other_seed:
        assert check_box_complaint(public_key(seed), box, prove_box_opening(seed, box)) is None


@SETTINGS
@given(seeds, data_keys, st.integers(min_value=32, max_value=79), st.integers(min_value=0, max_value=7))
def test_a_box_with_a_changed_ciphertext_byte_is_junk(seed, key, index, bit):
    """Attack: a requester delivers a good box with one byte of its ciphertext or tag changed."""
    box = bytearray(seal_data_key(key, public_key(seed)))
    box[index] ^= 1 << bit
    box = bytes(box)
    assert check_box_complaint(public_key(seed), box, prove_box_opening(seed, box)) is None
    assert libsodium_opens(seed, box) is None


@SETTINGS
@given(seeds, data_keys, st.integers(min_value=0, max_value=PROOF_BYTES * 8 - 1))
def test_a_proof_with_any_bit_flipped_is_refused(seed, key, bit):
    """Attack: a worker alters its proof (a different shared point, challenge or response) to claim junk."""
    box = seal_data_key(key, public_key(seed))
    proof = bytearray(prove_box_opening(seed, box))
    proof[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(public_key(seed), box, bytes(proof))


@SETTINGS
@given(seeds, data_keys, st.binary(min_size=PROOF_BYTES, max_size=PROOF_BYTES))
def test_a_random_proof_is_refused(seed, key, proof):
    """Attack: a worker reveals a made-up shared point with made-up challenge and response."""
    box = seal_data_key(key, public_key(seed))
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(public_key(seed), box, proof)


@SETTINGS
@given(seeds, data_keys, st.integers(min_value=1, max_value=GROUP_ORDER - 1))
def test_a_random_point_in_the_subgroup_with_a_random_proof_is_refused(seed, key, scalar):
    """Attack: the revealed S is a valid point (so it passes the point checks) but not the box's secret."""
    box = seal_data_key(key, public_key(seed))
    point = sodium.crypto_scalarmult_ed25519_base_noclamp(scalar.to_bytes(32, "little"))
    made_up = prove_box_opening(seed, box)[32:]
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(public_key(seed), box, point + made_up)


@SETTINGS
@given(seeds, seeds, data_keys)
def test_another_keys_secret_and_proof_are_refused_for_this_recipient(seed, other_seed, key):
    """Attack: a worker presents the shared point and valid proof of another key (one it controls, for which
    the box is junk) as its own."""
    box = seal_data_key(key, public_key(seed))
    if seed != other_seed:
        with pytest.raises(InvalidBoxProof):
            check_box_complaint(public_key(seed), box, prove_box_opening(other_seed, box))


@SETTINGS
@given(seeds, data_keys, data_keys)
def test_a_proof_for_another_box_is_refused(seed, key, other_key):
    """Attack: a worker answers the complaint about one box with the proof of another box (junk, say) it got."""
    box = seal_data_key(key, public_key(seed))
    other_box = seal_data_key(other_key, public_key(seed))
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(public_key(seed), box, prove_box_opening(seed, other_box))
    with pytest.raises(InvalidBoxProof):  # same ephemeral key, other ciphertext: the proof names the whole box
        changed = box[:40] + bytes([box[40] ^ 1]) + box[41:]
        check_box_complaint(public_key(seed), changed, prove_box_opening(seed, box))


@pytest.mark.parametrize("u", SMALL_ORDER_U)
@pytest.mark.parametrize("top_bit", [0, 1 << 255])
def test_a_small_order_ephemeral_key_is_junk_without_a_proof(u, top_bit):
    """Attack: a requester seals with an ephemeral key of small order, whose X25519 secret is zero: libsodium
    refuses it, so the box is junk, and the chain says so without reading the proof."""
    seed = hashlib.sha256(b"recipient").digest()
    box = ((u + top_bit) % 2**256).to_bytes(32, "little") + bytes(48)
    assert libsodium_opens(seed, box) is None
    with pytest.raises(Exception):  # noqa: B017 - libsodium's refusal has no narrower type
        sodium.crypto_box_beforenm(box[:32], x25519_secret(seed))
    assert ephemeral_base(box) is None
    assert prove_box_opening(seed, box) == bytes(PROOF_BYTES)
    assert check_box_complaint(public_key(seed), box, bytes(PROOF_BYTES)) is None
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(public_key(seed), box, bytes(PROOF_BYTES - 1))


def is_on_the_curve(u: int) -> bool:
    """Whether u^3 + A u^2 + u is a square mod p (else u lies on Curve25519's twist)."""
    value = (u**3 + 486662 * u**2 + u) % FIELD_PRIME
    return value == 0 or pow(value, (FIELD_PRIME - 1) // 2, FIELD_PRIME) == 1


@SETTINGS
@given(st.integers(min_value=2, max_value=FIELD_PRIME - 2), st.binary(min_size=48, max_size=48))
def test_an_ephemeral_key_on_the_twist_is_junk_whatever_the_proof(u, ciphertext):
    """Attack: a requester seals with a u-coordinate on the twist; nobody without the recipient's secret can
    make such a box open, so it is junk and any proof of the right length is accepted as is."""
    box = u_bytes(u) + ciphertext
    seed = hashlib.sha256(b"recipient").digest()
    if not is_on_the_curve(u):
        assert ephemeral_base(box) is None
        assert check_box_complaint(public_key(seed), box, bytes(range(PROOF_BYTES))) is None
    else:
        assert (ephemeral_base(box) is None) == (u in SMALL_ORDER_U)


ORDER_EIGHT_POINT = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
"""A point of order 8 on edwards25519 (from libsodium's list of small-order encodings)."""


def edwards_y(u: int) -> int:
    return (u - 1) * pow(u + 1, FIELD_PRIME - 2, FIELD_PRIME) % FIELD_PRIME


def montgomery_u(point: bytes) -> int:
    y = int.from_bytes(point, "little") & (2**255 - 1)
    return (1 + y) * pow(1 - y, FIELD_PRIME - 2, FIELD_PRIME) % FIELD_PRIME


def with_torsion(ephemeral: bytes, multiple: int) -> bytes:
    """The u-coordinate of the ephemeral point plus `multiple` times a point of order 8."""
    point = u_bytes(edwards_y(int.from_bytes(ephemeral, "little")))
    for _ in range(multiple):
        point = sodium.crypto_core_ed25519_add(point, ORDER_EIGHT_POINT)
    return u_bytes(montgomery_u(point))


def test_the_torsion_point_has_order_eight():
    multiples = [ORDER_EIGHT_POINT]
    for _ in range(7):
        multiples.append(sodium.crypto_core_ed25519_add(multiples[-1], ORDER_EIGHT_POINT))
    assert multiples[-1] == u_bytes(1) and u_bytes(1) not in multiples[:-1]


@SETTINGS
@given(seeds, st.binary(min_size=32, max_size=32), st.integers(min_value=0, max_value=7))
def test_the_proven_secret_is_the_x25519_secret_libsodium_computes(seed, ephemeral_secret, torsion):
    """The revealed point gives exactly X25519(recipient, epk) and crypto_box_beforenm's key, also for an
    ephemeral point carrying a small-order component (which the recipient's clamped scalar removes)."""
    ephemeral = sodium.crypto_scalarmult_base(ephemeral_secret)
    torsioned = with_torsion(ephemeral, torsion)
    assert (torsioned == ephemeral) == (torsion == 0)
    box = torsioned + bytes(48)
    shared = prove_box_opening(seed, box)[:32]
    expected = sodium.crypto_scalarmult(x25519_secret(seed), torsioned)
    assert shared_secret(shared) == expected == sodium.crypto_scalarmult(x25519_secret(seed), ephemeral)
    assert hsalsa20(shared_secret(shared)) == sodium.crypto_box_beforenm(torsioned, x25519_secret(seed))
    assert check_box_complaint(public_key(seed), box, prove_box_opening(seed, box)) is None


@SETTINGS
@given(seeds, data_keys, st.binary(min_size=32, max_size=32), st.integers(min_value=0, max_value=7), st.booleans())
def test_the_chain_opens_what_libsodium_opens_for_an_unusual_ephemeral_key(seed, key, ephemeral_secret, torsion,
                                                                          top_bit):
    """Attack: a requester seals with an ephemeral point carrying a small-order component, or with X25519's
    ignored top bit set. The recipient's libsodium still opens such a box, so the chain must open it too, else
    the worker reads the key and still gets released as if the box were junk."""
    recipient = public_key(seed)
    ephemeral = bytearray(with_torsion(sodium.crypto_scalarmult_base(ephemeral_secret), torsion))
    ephemeral[31] |= 0x80 if top_bit else 0
    box = seal_with_ephemeral(key, recipient, ephemeral_secret, bytes(ephemeral))
    assert libsodium_opens(seed, box) == key
    assert check_box_complaint(recipient, box, prove_box_opening(seed, box)) == key


@pytest.mark.parametrize("length", [0, 79, 81, 160])
def test_a_box_of_the_wrong_length_is_junk(length):
    seed = hashlib.sha256(b"recipient").digest()
    box = bytes(length)
    assert check_box_complaint(public_key(seed), box, prove_box_opening(seed, box)) is None


@pytest.mark.parametrize("length", [0, 95, 97, 128])
def test_a_proof_of_the_wrong_length_is_refused(length):
    seed = hashlib.sha256(b"recipient").digest()
    box = seal_data_key(bytes(32), public_key(seed))
    proof = prove_box_opening(seed, box)
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(public_key(seed), box, (proof * 2)[:length])


@pytest.mark.parametrize("recipient", [bytes(32), bytes(31), ORDER_EIGHT_POINT, b"\x01" + bytes(31)])
def test_a_recipient_key_outside_the_prime_order_group_is_refused(recipient):
    """No proof can tie a small-order, malformed or identity key to a box; the complaint is refused."""
    seed = hashlib.sha256(b"recipient").digest()
    box = seal_data_key(bytes(32), public_key(seed))
    with pytest.raises(InvalidBoxProof):
        check_box_complaint(recipient, box, prove_box_opening(seed, box))


def test_the_proof_is_deterministic_and_of_fixed_size():
    """The same complaint re-sent after a lost transaction is the same bytes; different boxes, other nonces."""
    seed = hashlib.sha256(b"recipient").digest()
    first = seal_data_key(bytes(32), public_key(seed))
    second = seal_data_key(bytes(32), public_key(seed))
    assert prove_box_opening(seed, first) == prove_box_opening(seed, first)
    assert prove_box_opening(seed, first)[32:64] != prove_box_opening(seed, second)[32:64]
    assert {len(prove_box_opening(seed, box)) for box in (first, second, bytes(80), bytes(3))} == {PROOF_BYTES}
