"""Canonical encodings for state values: fixed-width integers and canonical JSON (sorted keys, no floats)."""

from __future__ import annotations

import json
from typing import Any

U64_MAX = (1 << 64) - 1


def canonical_json(value: Any) -> bytes:
    """UTF-8 JSON with sorted keys and no whitespace; floats are refused so state stays integer-only."""
    _reject_floats(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def load_json(raw: bytes) -> Any:
    return json.loads(raw)


def _reject_floats(value: Any) -> None:
    if isinstance(value, float):
        raise TypeError("floats are not allowed in chain state")
    if isinstance(value, dict):
        for item in value.values():
            _reject_floats(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _reject_floats(item)


def encode_u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


def decode_u64(raw: bytes) -> int:
    return int.from_bytes(raw, "big")
