"""A sender's proof that it knows the secret of its sealed box's ephemeral key, so a complaint leaks nothing.

A recipient's complaint (`chain/box_proofs.py`) reveals S = a*P for the box's ephemeral point P, which the
sender chose. If the sender did not know P's discrete logarithm it learns something new from S: a sender that
sets P = m*P1, for P1 the ephemeral point of another sender's box to the same recipient and m a scalar it
knows, delivers junk under P, waits for the honest complaint and reads a*P1 = S/m, the other box's secret.
The remedy is the usual one: the sender proves knowledge of e with P = e*B (a Schnorr proof) when it delivers;
then S = e*A is a value the sender already held, and the complaint reveals nothing it did not know.

Statement: epk is a canonical u (below p), its lift P (y = (u-1)/(u+1), sign bit 0) is a point of the
prime-order subgroup (every honest X25519 public key's is), and the sender knows e with P = e*B.
Proof bytes (`SENDER_PROOF_BYTES` = 64): c || s, canonical non-zero scalars; R = s*B - c*P and
c = sha512(SENDER_TAG || context || A || sealed box || R) mod L. The challenge names the whole box, the
recipient and a context the caller chooses (the task, say), so a proof is not copied onto another box, to
another recipient, or into another task.
"""

from __future__ import annotations

import hashlib

import nacl.bindings as sodium

from .box_proofs import FIELD_PRIME, POINT_BYTES, SEALED_BOX_BYTES, edwards_lift, is_canonical_nonzero_scalar
from .errors import InvalidBoxProof

SENDER_PROOF_BYTES = 64
"""A sender's proof: the challenge c and the response s."""

SENDER_TAG = b"trolly/sealed-box-sender/v1"
"""Domain separation of the sender proof's challenge hash."""


def ephemeral_point(sealed_box: bytes) -> bytes:
    """P, the prime-order-subgroup point whose u is the box's ephemeral key; InvalidBoxProof when there is none
    (a box of another length, a non-canonical u, u on the twist, or P of small order or carrying torsion)."""
    if len(sealed_box) != SEALED_BOX_BYTES:
        raise InvalidBoxProof(f"a sealed key is {SEALED_BOX_BYTES} bytes, got {len(sealed_box)}")
    u = int.from_bytes(sealed_box[:POINT_BYTES], "little")
    lifted = edwards_lift(u) if u < FIELD_PRIME else None
    if lifted is None or not sodium.crypto_core_ed25519_is_valid_point(lifted):
        raise InvalidBoxProof("the box's ephemeral key is not an X25519 public key of the prime-order subgroup")
    return lifted


def sender_challenge(context: bytes, recipient_public_key: bytes, sealed_box: bytes, commitment: bytes) -> bytes:
    """c = sha512(tag || context || A || box || R) mod L. The context's length goes first, so no two
    (context, key) pairs hash alike."""
    digest = hashlib.sha512(SENDER_TAG + len(context).to_bytes(8, "little") + context + recipient_public_key
                            + sealed_box + commitment).digest()
    return sodium.crypto_core_ed25519_scalar_reduce(digest)


def check_sender_proof(recipient_public_key: bytes, sealed_box: bytes, context: bytes, proof: bytes) -> None:
    """Returns when `proof` shows the sender knows the discrete logarithm of the box's ephemeral point, for
    this recipient, box and context; raises InvalidBoxProof otherwise."""
    if len(proof) != SENDER_PROOF_BYTES:
        raise InvalidBoxProof(f"a sender proof is {SENDER_PROOF_BYTES} bytes, got {len(proof)}")
    point = ephemeral_point(sealed_box)
    challenge, response = proof[:32], proof[32:]
    if not (is_canonical_nonzero_scalar(challenge) and is_canonical_nonzero_scalar(response)):
        raise InvalidBoxProof("the sender proof's challenge or response is not a canonical non-zero scalar")
    commitment = sodium.crypto_core_ed25519_sub(sodium.crypto_scalarmult_ed25519_base_noclamp(response),
                                                sodium.crypto_scalarmult_ed25519_noclamp(challenge, point))
    if sender_challenge(context, recipient_public_key, sealed_box, commitment) != challenge:
        raise InvalidBoxProof("the sender proof does not verify: the sender does not show it knows the box's "
                              "ephemeral secret")
