"""Chain parameters: one frozen dataclass per module section, with a docstring under every field.

Parameters live in state under `keys.PARAMS + section`, as canonical JSON, and are set at genesis from
`app_state["params"][section]`; a missing field takes its default. Two presets exist: `production` (the
defaults) and `localnet` (short periods so a developer sees things happen in seconds). A module adds its
own section by defining a dataclass with a `SECTION` name and registering it on its `Module`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, TypeVar

from . import keys
from .codec import canonical_json
from .errors import InvalidRequest
from .state import State

P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class AuthParams:
    SECTION = "auth"

    max_tx_bytes: int = 65536
    """Largest accepted transaction, in bytes (task specs travel inline, so this is generous)."""

    min_fee: int = 1_000
    """The fixed part of the smallest fee a transaction must pay, in utrl: sending costs something, so a flood
    of transactions costs its sender in proportion to its count."""

    fee_per_byte: int = 10
    """The part of the smallest fee that grows with the transaction's encoded size, in utrl per byte: a task
    spec or a long memo costs what it weighs, so filling blocks and every node's state costs in proportion."""

    max_messages_per_tx: int = 32
    """Upper bound on messages in one transaction, to bound the work of a single tx."""

    max_memo_bytes: int = 256
    """Longest memo, in bytes."""

    def minimum_fee(self, tx_bytes: int) -> int:
        """The smallest fee a transaction of `tx_bytes` encoded bytes must carry: `min_fee + fee_per_byte x size`."""
        return self.min_fee + self.fee_per_byte * tx_bytes


def params_to_json(params: Any) -> dict:
    return dataclasses.asdict(params)


def params_from_json(cls: type[P], data: dict | None) -> P:
    """Build a params dataclass from JSON, refusing unknown fields and non-integer numbers."""
    data = dict(data or {})
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InvalidRequest(f"unknown {cls.SECTION} params: {', '.join(unknown)}")
    for name, value in data.items():
        if isinstance(names[name].default, int) and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidRequest(f"param {cls.SECTION}.{name} must be an integer, got {value!r}")
    return cls(**data)


def set_params(state: State, params: Any) -> None:
    state.set(keys.PARAMS + params.SECTION.encode(), canonical_json(params_to_json(params)))


@functools.lru_cache(maxsize=64)
def _decode(cls: type, raw: bytes) -> Any:
    return cls(**json.loads(raw))


def get_params(state: State, cls: type[P]) -> P:
    """The section's params from state, or its defaults if genesis did not set them."""
    raw = state.get(keys.PARAMS + cls.SECTION.encode())
    return cls() if raw is None else _decode(cls, raw)
