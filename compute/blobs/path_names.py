"""The names a blob service's or a relay's request paths carry, read before any file path is built from them.

A router hands a handler its path's parts percent-decoded: `%2F` arrives as `/`, so a "worker address" can be
`../../etc/x`. Every part that becomes part of a file path is read here first, strictly, and anything else is
refused (HTTP 400): a worker address is a bech32 `trolly1...` address in its one canonical (lower-case) form,
read by the chain's own decoder; a task id or round is a plain decimal number (ASCII digits, no sign, no leading
zero) below 2^64. The stores check again that the path they build stays under their root (`inside`).
"""

from __future__ import annotations

import pathlib

from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.errors import ChainError

from .errors import BlobRejected

MAX_DECIMAL_DIGITS = 20
"""Digits of the largest unsigned 64-bit number."""


class InvalidPathName(BlobRejected):
    """A request path's worker address, task id or round is not in its one accepted form (HTTP 400)."""


def worker_address(text: str) -> str:
    """`text` if it is a worker's bech32 address in canonical form; `InvalidPathName` otherwise."""
    try:
        canonical = encode_address(decode_address(text))
    except ChainError:
        canonical = None
    if canonical != text:
        raise InvalidPathName(f"{_shown(text)} is not a worker address (trolly1..., lower case)")
    return text


def unsigned_id(text: str, what: str) -> int:
    """`text` as an unsigned 64-bit number written plainly in decimal; `InvalidPathName` otherwise."""
    if not (text.isascii() and text.isdecimal() and len(text) <= MAX_DECIMAL_DIGITS
            and (text == "0" or text[0] != "0")) or int(text) >= 2**64:
        raise InvalidPathName(f"{what} {_shown(text)} is not an unsigned 64-bit decimal number")
    return int(text)


def inside(root: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """`path` if it resolves to a place under `root` (a last check that no name walked out of the store)."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise InvalidPathName(f"{path} is outside the store")
    return path


def _shown(text: str) -> str:
    return repr(text[:100])
