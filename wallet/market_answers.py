"""Reading one market answer into its view: every field present, of the type its view declares, or an error.

A view (`market_views.py`) is a frozen dataclass whose field names are the answer's JSON keys and whose
annotations say what each value must be; `parse_answer` walks those annotations, so the checks of every view
live here once:

    int, bool, str       a JSON value of exactly that type (a boolean is not an integer here)
    Hash                 lower-case hex of whole bytes, or '' where the chain has none yet
    Address              a `trolly1...` address: its shape (the chain checks checksums on what it is sent)
    one_of(...)          a string field that must be one of the chain's names for it (statuses, phases...)
    tuple[X, ...]        a JSON list, each item read as X
    dict[str, int]       a JSON object of integers (a task's terms)
    X | None             null or X
    a dataclass          a JSON object read as that view

Fields an answer carries beyond its view's are left alone: a newer chain may add some, and a client reads only
what it knows. Whatever does not fit raises `MarketAnswerError`, naming the field (`task.members[1].index`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, NewType, TypeVar

from trolly.chain.crypto import ADDRESS_PREFIX
from trolly.chain.errors import ChainError

from .errors import MarketAnswerError

V = TypeVar("V")

Hash = NewType("Hash", str)
"""A hash or commitment as the chain writes it: lower-case hex ('' where there is none yet)."""

Address = NewType("Address", str)
"""An account address as the chain writes it: bech32 `trolly1...`."""

_ADDRESS_LENGTH = len(ADDRESS_PREFIX) + 1 + 32 + 6
"""Characters of a bech32 address of 20 bytes: prefix, separator, 32 five-bit groups, 6 checksum characters."""
_BECH32_CHARACTERS = frozenset("qpzry9x8gf2tvdw0s3jn54khce6mua7l")
_HEX_DIGITS = frozenset("0123456789abcdef")


def one_of(*names: str) -> Any:
    """A field that holds one of `names` (the chain's vocabulary for it), checked when the answer is read."""
    return dataclasses.field(metadata={"one_of": frozenset(names)})


def parse_answer(view: type[V], answer: Any, where: str, skip: frozenset[str] = frozenset()) -> V:
    """`answer` (decoded JSON) read as `view`; fields named in `skip` keep their defaults (the caller fills them)."""
    if not isinstance(answer, dict):
        raise MarketAnswerError(f"{where}: expected an object, got {_kind(answer)}")
    hints = typing.get_type_hints(view)
    values = {}
    for field in dataclasses.fields(view):
        if not field.init or field.name in skip:
            continue
        if field.name not in answer:
            raise MarketAnswerError(f"{where}: the answer has no {field.name!r}")
        values[field.name] = _read(hints[field.name], answer[field.name], f"{where}.{field.name}", field.metadata)
    try:
        return view(**values)
    except ChainError as error:  # a view the chain itself declares (MarketParams) checks its values too
        raise MarketAnswerError(f"{where}: {error}") from None


def plain(value: Any) -> Any:
    """A view (or a value inside one) as the JSON the chain answered: objects, lists and scalars."""
    if dataclasses.is_dataclass(value):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def _read(hint: Any, value: Any, where: str, metadata: typing.Mapping) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _read(hint, value, where, metadata)
    if origin is tuple:
        item_hint = typing.get_args(hint)[0]
        return tuple(_read(item_hint, item, f"{where}[{i}]", metadata) for i, item in enumerate(_list(value, where)))
    if origin is dict:
        if not isinstance(value, dict) or not all(type(v) is int for v in value.values()):
            raise MarketAnswerError(f"{where}: expected an object of integers, got {_kind(value)}")
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return parse_answer(hint, value, where)
    if hint is Hash:
        return _hash(value, where)
    if hint is Address:
        return _address(value, where)
    if hint in (int, bool, str):
        if type(value) is not hint:
            raise MarketAnswerError(f"{where}: expected {hint.__name__}, got {_kind(value)}")
        if "one_of" in metadata and value not in metadata["one_of"]:
            known = ", ".join(sorted(metadata["one_of"]))
            raise MarketAnswerError(f"{where}: unknown value {value[:40]!r} (known: {known})")
        return value
    raise TypeError(f"{where}: a view field of type {hint!r} has no reader")  # a view written wrong: a bug here


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise MarketAnswerError(f"{where}: expected a list, got {_kind(value)}")
    return value


def _hash(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) % 2 or not _HEX_DIGITS.issuperset(value):
        raise MarketAnswerError(f"{where}: expected lower-case hex, got {_kind(value)}")
    return value


def _address(value: Any, where: str) -> str:
    if (not isinstance(value, str) or len(value) != _ADDRESS_LENGTH or not value.startswith(ADDRESS_PREFIX + "1")
            or not _BECH32_CHARACTERS.issuperset(value[len(ADDRESS_PREFIX) + 1:])):
        raise MarketAnswerError(f"{where}: expected a {ADDRESS_PREFIX}1... address, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    """What a refused value was, short enough for a one-line error."""
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    return type(value).__name__ if isinstance(value, (dict, list)) or value is None else repr(value)
