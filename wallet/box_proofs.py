"""The proofs about a sealed data key: the recipient's of its Diffie-Hellman secret, and the sender's of its
ephemeral secret.

A worker whose sealed box does not open complains on chain with this proof, and the chain opens the box with the
revealed secret to see for itself (`trolly.chain.box_proofs`, where the statement and the proof bytes are
described). The proof reveals S = a*P for the box's ephemeral point P, never the secret scalar a.

The proof's nonce r is derived, as Ed25519's and RFC 6979's are, from the secret and the statement
(sha512 of a domain tag, the expanded seed and the box) rather than drawn from the OS: a repeated or guessable
r across two proofs with different challenges gives away the secret scalar, and a derived one cannot repeat
unless the box does; the same complaint re-sent after a lost transaction is then the same bytes.

The sender's side (`seal_with_sender_proof`) seals as PyNaCl's `SealedBox` does, byte for byte, but keeps the
ephemeral secret long enough to prove it knows it (`trolly.chain.box_sender_proofs` says why a complaint needs
that); its nonce is derived the same way, from the ephemeral secret and the box.
"""

from __future__ import annotations

import hashlib

import nacl.bindings as sodium
import nacl.signing
import nacl.utils

from trolly.chain.box_proofs import (COFACTOR_BASE, GROUP_ORDER, PROOF_BYTES, ephemeral_base, proof_challenge)
from trolly.chain.box_sender_proofs import ephemeral_point, sender_challenge

NONCE_TAG = b"trolly/sealed-box-complaint/nonce/v1"
"""Domain separation of the proof's nonce hash from Ed25519's own nonce hash over the same expanded seed."""

SENDER_NONCE_TAG = b"trolly/sealed-box-sender/nonce/v1"
"""Domain separation of the sender proof's nonce hash."""


def _scalar(value: int) -> bytes:
    return (value % GROUP_ORDER).to_bytes(32, "little")


def _clamped(secret: bytes) -> int:
    """The scalar X25519 and ed25519 make of 32 secret bytes: a multiple of 8 with bit 254 set."""
    clamped = bytearray(secret[:32])
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    return int.from_bytes(clamped, "little")


def prove_box_opening(seed: bytes, sealed_box: bytes) -> bytes:
    """The proof (`PROOF_BYTES`) of the box's shared secret by the holder of the ed25519 `seed`. A box whose
    ephemeral key is no usable point needs no proof (the chain reads none); its proof is zero bytes."""
    if len(seed) != 32:
        raise ValueError("an ed25519 seed is 32 bytes")
    base = ephemeral_base(sealed_box)
    if base is None:
        return bytes(PROOF_BYTES)
    expanded = hashlib.sha512(seed).digest()
    secret = _scalar(_clamped(expanded) >> 3)  # k with a = 8k, a the clamped half of sha512(seed)
    public_key = bytes(nacl.signing.SigningKey(seed).verify_key)
    shared = sodium.crypto_scalarmult_ed25519_noclamp(secret, base)
    nonce = sodium.crypto_core_ed25519_scalar_reduce(hashlib.sha512(NONCE_TAG + expanded + sealed_box).digest())
    challenge = proof_challenge(public_key, sealed_box, base, shared,
                                sodium.crypto_scalarmult_ed25519_noclamp(nonce, COFACTOR_BASE),
                                sodium.crypto_scalarmult_ed25519_noclamp(nonce, base))
    response = sodium.crypto_core_ed25519_scalar_add(nonce, sodium.crypto_core_ed25519_scalar_mul(challenge, secret))
    return shared + challenge + response


def seal_with_sender_proof(key: bytes, recipient_public_key: bytes, context: bytes) -> tuple[bytes, bytes]:
    """`key` sealed to the ed25519 key `recipient_public_key` (what `nacl.public.SealedBox` makes, under a fresh
    ephemeral key from the OS), and the sender's proof (`SENDER_PROOF_BYTES`) for it within `context`."""
    ephemeral_secret = nacl.utils.random(32)
    ephemeral_public = sodium.crypto_scalarmult_base(ephemeral_secret)
    recipient_x25519 = sodium.crypto_sign_ed25519_pk_to_curve25519(recipient_public_key)
    nonce = hashlib.blake2b(ephemeral_public + recipient_x25519, digest_size=sodium.crypto_box_NONCEBYTES).digest()
    sealed_box = ephemeral_public + sodium.crypto_box_easy(key, nonce, recipient_x25519, ephemeral_secret)
    point = ephemeral_point(sealed_box)
    secret = _scalar(_clamped(ephemeral_secret))
    if sodium.crypto_scalarmult_ed25519_base_noclamp(secret) != point:  # the lift took the other sign: P = -e*B
        secret = sodium.crypto_core_ed25519_scalar_negate(secret)
    nonce_scalar = sodium.crypto_core_ed25519_scalar_reduce(
        hashlib.sha512(SENDER_NONCE_TAG + ephemeral_secret + context + sealed_box).digest())
    challenge = sender_challenge(context, recipient_public_key, sealed_box,
                                 sodium.crypto_scalarmult_ed25519_base_noclamp(nonce_scalar))
    response = sodium.crypto_core_ed25519_scalar_add(nonce_scalar,
                                                     sodium.crypto_core_ed25519_scalar_mul(challenge, secret))
    return sealed_box, challenge + response
