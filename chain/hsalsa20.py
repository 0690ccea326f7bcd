"""HSalsa20, the step of NaCl's `crypto_box` that turns an X25519 shared secret into the box key.

`crypto_box_beforenm(pk, sk)` is `hsalsa20(X25519(sk, pk), zero nonce)`. PyNaCl exposes only the two together,
so a party that learns the shared secret some other way (the chain, from a recipient's proven complaint:
`chain/box_proofs.py`) derives the key here. Pure Python over 32-bit words; tests hold it to
`crypto_box_beforenm`.
"""

from __future__ import annotations

import struct

SIGMA = b"expand 32-byte k"
"""Salsa20's constant for a 32-byte key."""

DOUBLE_ROUNDS = 10
MASK = 0xFFFFFFFF


def _rotate_left(word: int, count: int) -> int:
    return ((word << count) | (word >> (32 - count))) & MASK


def _quarter_round(x: list[int], a: int, b: int, c: int, d: int) -> None:
    x[b] ^= _rotate_left((x[a] + x[d]) & MASK, 7)
    x[c] ^= _rotate_left((x[b] + x[a]) & MASK, 9)
    x[d] ^= _rotate_left((x[c] + x[b]) & MASK, 13)
    x[a] ^= _rotate_left((x[d] + x[c]) & MASK, 18)


def hsalsa20(key: bytes, nonce: bytes = bytes(16)) -> bytes:
    """HSalsa20 of a 32-byte key and a 16-byte nonce: Salsa20's 20 rounds without the final addition, output
    words 0, 5, 10, 15, 6, 7, 8, 9 (the diagonal and the nonce's positions)."""
    if len(key) != 32 or len(nonce) != 16:
        raise ValueError("HSalsa20 takes a 32-byte key and a 16-byte nonce")
    constant = struct.unpack("<4I", SIGMA)
    key_words = struct.unpack("<8I", key)
    nonce_words = struct.unpack("<4I", nonce)
    x = [constant[0], *key_words[:4], constant[1], *nonce_words, constant[2], *key_words[4:], constant[3]]
    for _ in range(DOUBLE_ROUNDS):
        _quarter_round(x, 0, 4, 8, 12)   # columns
        _quarter_round(x, 5, 9, 13, 1)
        _quarter_round(x, 10, 14, 2, 6)
        _quarter_round(x, 15, 3, 7, 11)
        _quarter_round(x, 0, 1, 2, 3)    # rows
        _quarter_round(x, 5, 6, 7, 4)
        _quarter_round(x, 10, 11, 8, 9)
        _quarter_round(x, 15, 12, 13, 14)
    return struct.pack("<8I", x[0], x[5], x[10], x[15], x[6], x[7], x[8], x[9])
