"""Bech32 encoding of bytes by lookup tables: the fast path beside the `bech32` package's reference.

Every transaction shows its signer (and a send its recipient) as a `trolly1...` address in its events, and
the reference implementation (`bech32.bech32_encode` after `convertbits`) spends its time in per-bit Python
loops, on the order of the signature check itself (docs/performance.md). This computes the same string with
table look-ups, from two facts:

- The data characters are the bytes read as one big-endian integer and cut into 5-bit values (the last
  padded with zero bits); a 1,024-entry table gives two characters per 10-bit slice.
- The BIP-173 checksum (the BCH polymod over the expanded human-readable part, the data values and six zero
  values, XOR 1) is linear over GF(2) in the data bits: each step shifts the state and XORs in the input and
  generator terms chosen by bits of the state. So for a given prefix and data length the checksum is a
  constant (the polymod of all-zero data) XOR, for every byte, a term that depends only on that byte's
  position and value. Those terms are tabulated once per (prefix, length): 256 per byte position, built
  from the contribution of each single bit. Encoding is then one XOR per byte.

Tests compare it with the reference on random inputs of every length.
"""

from __future__ import annotations

import functools

CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
_CHECKSUM_CHARACTERS = 6
_PAIRS = tuple(CHARSET[pair >> 5] + CHARSET[pair & 31] for pair in range(1024))
"""The two characters of a 10-bit value."""


def _polymod(values: list[int], state: int = 1) -> int:
    """BIP-173's checksum state after feeding `values` (5-bit each) into `state`."""
    for value in values:
        top = state >> 25
        state = (state & 0x1FFFFFF) << 5 ^ value
        for bit in range(5):
            if top >> bit & 1:
                state ^= _GENERATOR[bit]
    return state


def _hrp_values(hrp: str) -> list[int]:
    """BIP-173 `bech32_hrp_expand`."""
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _five_bit_groups(number: int, bit_count: int) -> list[int]:
    """The `bit_count`-bit big-endian `number` as 5-bit groups, the last padded with zero bits."""
    padding = -bit_count % 5
    number <<= padding
    groups = (bit_count + padding) // 5
    return [number >> 5 * (groups - 1 - i) & 31 for i in range(groups)]


@functools.lru_cache(maxsize=16)
def _checksum_tables(hrp: str, length: int) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """(checksum state of all-zero data, per byte position a 256-entry table of that byte's XOR term)."""
    bit_count = 8 * length
    zeros = [0] * _CHECKSUM_CHARACTERS
    constant = _polymod(_five_bit_groups(0, bit_count) + zeros, _polymod(_hrp_values(hrp)))
    # A single data bit fed from a zero state: its whole contribution (the zero-data part is in `constant`).
    bit_terms = [_polymod(_five_bit_groups(1 << (bit_count - 1 - bit), bit_count) + zeros, 0) for bit in range(bit_count)]
    tables = []
    for position in range(length):
        terms = bit_terms[8 * position:8 * position + 8]  # most significant bit first
        table = [0] * 256
        for byte in range(1, 256):
            lowest = byte & -byte
            table[byte] = table[byte ^ lowest] ^ terms[7 - (lowest.bit_length() - 1)]
        tables.append(tuple(table))
    return constant, tuple(tables)


@functools.lru_cache(maxsize=16)
def _slices(length: int) -> tuple[int, int, tuple[int, ...]]:
    """How to cut `length` bytes into characters: (zero bits to append, shift of a leading single 5-bit
    group or -1 if the group count is even, shifts of the 10-bit slices after it)."""
    bit_count = 8 * length
    padding = -bit_count % 5
    groups = (bit_count + padding) // 5
    single = 5 * (groups - 1) if groups % 2 else -1
    pairs = groups // 2
    return padding, single, tuple(10 * (pairs - 1 - i) for i in range(pairs))


@functools.lru_cache(maxsize=1 << 16)
def bech32_encode_bytes(hrp: str, data: bytes) -> str:
    """`bech32.bech32_encode(hrp, convertbits(data, 8, 5))`, the same string, by table look-ups.

    Cached too: the same few thousand active addresses recur block after block.
    """
    checksum, tables = _checksum_tables(hrp, len(data))
    for table, byte in zip(tables, data):
        checksum ^= table[byte]
    checksum ^= 1
    padding, single, shifts = _slices(len(data))
    number = int.from_bytes(data, "big") << padding
    lead = CHARSET[number >> single] if single >= 0 else ""
    characters = "".join([_PAIRS[number >> shift & 1023] for shift in shifts])
    return (hrp + "1" + lead + characters
            + _PAIRS[checksum >> 20] + _PAIRS[checksum >> 10 & 1023] + _PAIRS[checksum & 1023])
