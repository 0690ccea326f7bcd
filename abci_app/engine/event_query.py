"""CometBFT's event query language, as used by `tx_search` and websocket `subscribe`.

A query is conditions joined by `AND`: `tm.event = 'Tx' AND transfer.recipient = 'trolly1...' AND
tx.height >= 5`. A condition is a composite key (`type.attribute`, or the reserved `tm.event`, `tx.hash`,
`tx.height`), an operator (`=`, `<`, `<=`, `>`, `>=`, `CONTAINS`, `EXISTS`) and, except for EXISTS, an
operand: a single-quoted string, or a number (compared numerically). An event matches when, for every
condition, at least one of the values under its key satisfies it (CometBFT's semantics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import EngineError

OPERATORS = ("<=", ">=", "=", "<", ">", "CONTAINS", "EXISTS")


class QueryError(EngineError):
    """The query string does not parse."""


@dataclass(frozen=True)
class Condition:
    key: str
    operator: str
    operand: str | int | None  # None for EXISTS

    def matches(self, values: list[str]) -> bool:
        return any(self._matches_one(value) for value in values)

    def _matches_one(self, value: str) -> bool:
        if self.operator == "EXISTS":
            return True
        if self.operator == "CONTAINS":
            return str(self.operand) in value
        if isinstance(self.operand, int):
            number = _as_number(value)
            if number is None:
                return False
            return _compare(number, self.operator, self.operand)
        if self.operator == "=":
            return value == self.operand
        return _compare(value, self.operator, self.operand)


def _as_number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _compare(left, operator: str, right) -> bool:
    return {
        "=": left == right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[operator]


_TOKEN = re.compile(
    r"\s*(?:(?P<and>AND)\b|(?P<op><=|>=|=|<|>|CONTAINS\b|EXISTS\b)|'(?P<string>[^']*)'|(?P<number>-?[0-9]+)\b"
    r"|(?P<key>[A-Za-z_][\w.\-/]*))"
)


@dataclass(frozen=True)
class Query:
    text: str
    conditions: tuple[Condition, ...]

    def matches(self, events: dict[str, list[str]]) -> bool:
        return all(condition.key in events and condition.matches(events[condition.key]) for condition in self.conditions)

    def equality(self, key: str) -> str | int | None:
        """The operand of the first `key = operand` condition, if any (the indexer's fast path)."""
        for condition in self.conditions:
            if condition.key == key and condition.operator == "=":
                return condition.operand
        return None


MAX_NUMBER_DIGITS = 19
"""A query's number is an int64 in CometBFT (heights, amounts): at most 19 digits."""


def _operand_number(text: str, raw: str) -> int:
    if len(raw.lstrip("-")) > MAX_NUMBER_DIGITS or not -(1 << 63) <= int(raw) < 1 << 63:
        raise QueryError(f"failed to parse query {text[:200]!r}: the number {raw[:40]!r} is not a 64-bit integer")
    return int(raw)


def parse_query(text: str) -> Query:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise QueryError(f"failed to parse query {text!r} at position {position}")
        kind = match.lastgroup
        tokens.append((kind, match.group(kind)))
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    conditions: list[Condition] = []
    index = 0
    while index < len(tokens):
        if conditions:
            if tokens[index][0] != "and":
                raise QueryError(f"failed to parse query {text!r}: expected AND between conditions")
            index += 1
        if index + 1 >= len(tokens) or tokens[index][0] != "key" or tokens[index + 1][0] != "op":
            raise QueryError(f"failed to parse query {text!r}: expected `key operator value`")
        key, operator = tokens[index][1], tokens[index + 1][1]
        index += 2
        if operator == "EXISTS":
            conditions.append(Condition(key, operator, None))
            continue
        if index >= len(tokens) or tokens[index][0] not in ("string", "number"):
            raise QueryError(f"failed to parse query {text!r}: {key} {operator} needs a 'string' or number")
        kind, raw = tokens[index]
        index += 1
        conditions.append(Condition(key, operator, _operand_number(text, raw) if kind == "number" else raw))
    if not conditions:
        raise QueryError("empty query")
    return Query(text, tuple(conditions))
