"""A recipient's proof that a sealed data key's Diffie-Hellman secret is what its account key computes.

A worker whose sealed box does not open complains on chain with this proof, and the chain opens the box with the
revealed secret to see for itself (`trolly.chain.box_proofs`, where the statement and the proof bytes are
described). The proof reveals S = a*P for the box's ephemeral point P, never the secret scalar a.

The proof's nonce r is derived, as Ed25519's and RFC 6979's are, from the secret and the statement
(sha512 of a domain tag, the expanded seed and the box) rather than drawn from the OS: a repeated or guessable
r across two proofs with different challenges gives away the secret scalar, and a derived one cannot repeat
unless the box does; the same complaint re-sent after a lost transaction is then the same bytes.
"""

from __future__ import annotations

import hashlib

import nacl.bindings as sodium
import nacl.signing

from trolly.chain.box_proofs import (COFACTOR_BASE, GROUP_ORDER, PROOF_BYTES, ephemeral_base, proof_challenge)

NONCE_TAG = b"trolly/sealed-box-complaint/nonce/v1"
"""Domain separation of the proof's nonce hash from Ed25519's own nonce hash over the same expanded seed."""


def _scalar(value: int) -> bytes:
    return (value % GROUP_ORDER).to_bytes(32, "little")


def _secret_over_eight(expanded_seed: bytes) -> int:
    """k with a = 8k, for a the clamped first half of sha512(seed): the ed25519 and X25519 secret scalar."""
    clamped = bytearray(expanded_seed[:32])
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    return int.from_bytes(clamped, "little") >> 3


def prove_box_opening(seed: bytes, sealed_box: bytes) -> bytes:
    """The proof (`PROOF_BYTES`) of the box's shared secret by the holder of the ed25519 `seed`. A box whose
    ephemeral key is no usable point needs no proof (the chain reads none); its proof is zero bytes."""
    if len(seed) != 32:
        raise ValueError("an ed25519 seed is 32 bytes")
    base = ephemeral_base(sealed_box)
    if base is None:
        return bytes(PROOF_BYTES)
    expanded = hashlib.sha512(seed).digest()
    secret = _scalar(_secret_over_eight(expanded))
    public_key = bytes(nacl.signing.SigningKey(seed).verify_key)
    shared = sodium.crypto_scalarmult_ed25519_noclamp(secret, base)
    nonce = sodium.crypto_core_ed25519_scalar_reduce(hashlib.sha512(NONCE_TAG + expanded + sealed_box).digest())
    challenge = proof_challenge(public_key, sealed_box, base, shared,
                                sodium.crypto_scalarmult_ed25519_noclamp(nonce, COFACTOR_BASE),
                                sodium.crypto_scalarmult_ed25519_noclamp(nonce, base))
    response = sodium.crypto_core_ed25519_scalar_add(nonce, sodium.crypto_core_ed25519_scalar_mul(challenge, secret))
    return shared + challenge + response
