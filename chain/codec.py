"""Canonical encodings for state values (fixed-width integers, canonical JSON) and the bounded JSON reader.

Anything a transaction carries as JSON (a task spec) is read with `load_untrusted_json`, whose every limit is
written here: nesting depth, the length of a number, the size of an exponent, duplicate keys, NaN/Infinity,
lone surrogates, the count of values. None comes from the interpreter's settings (recursion limit,
`sys.set_int_max_str_digits`), so differently configured nodes accept and refuse exactly the same documents, and no
document makes the reader raise anything but `JsonRejected`.

Every check is linear in the document's length with a small constant, because a stranger's transaction pays
nothing for the CheckTx it fails: the bounds are read from the document with the strings taken out
(`_structure`: one regular-expression pass that never backtracks), so the parser and the per-value hooks run only
on documents whose depth and value count are already known to be small.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from itertools import accumulate
from typing import Any

U64_MAX = (1 << 64) - 1

MAX_JSON_DEPTH = 16
"""Deepest nesting of arrays and objects accepted; checked before parsing, so the parser never recurses deeper."""

MAX_JSON_NUMBER_CHARS = 40
"""Longest number token (digits, sign, point, exponent) accepted: every integer that fits in 64 bits and every
hyperparameter a spec needs, far below the smallest digit limit an interpreter can be set to (640)."""

MAX_JSON_EXPONENT = 38
"""Largest magnitude of a non-integer number's decimal exponent: such values stay normal in float32 and float64
on every worker, so a value the chain accepts is the value workers train with."""

MAX_JSON_VALUES = 1024
"""Most values (objects, arrays, strings, numbers, literals; a key counts with its value) in one document,
counted before parsing. A spec holds about 150 at most (64 hidden sizes and 16 URLs included); the bound keeps the
parser's per-value work (the number, key and string hooks below) small beside the document's bytes."""

# A string token: its opening quote, then runs of ordinary characters and escapes taken possessively (never given
# back), then its closing quote, or the end of the document for a string that is never closed. Once a quote
# opens a string the pattern cannot fail, so no position is scanned twice.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_NESTING_STEP = [1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256)]
"""What each byte value does to the nesting depth: +1 for an opening bracket, -1 for a closing one."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""The start of a `\\uD800`..`\\uDFFF` escape: the only way a lone surrogate gets into a parsed string (UTF-8
input cannot encode one), so a document without it needs no walk over its strings."""


class JsonRejected(ValueError):
    """A JSON document broke one of this module's limits or is not JSON; the message says which."""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""`json.dumps` with these arguments builds an encoder at every call; this one is built once."""


def canonical_json(value: Any, *, floats_checked: bool = False) -> bytes:
    """UTF-8 JSON with sorted keys and no whitespace; floats are refused so state stays integer-only.
    `floats_checked`: the caller has already made sure `value` holds no float (`encode_record` knows which of
    a record's fields are strings), so it is not walked again."""
    if not floats_checked:
        _reject_floats(value)
    return _CANONICAL.encode(value).encode()


def reject_floats(value: Any) -> None:
    """Raise TypeError if `value` is or holds a float (dicts, lists and tuples are walked). A value whose type
    is in `FLOATLESS_TYPES` needs no call."""
    _reject_floats(value)


def _structure(raw: bytes) -> bytes:
    """`raw` with every string token taken out: brackets, commas and colons left are the document's own.

    A string left open runs to the end, as a JSON parser reads it (and refuses it there): up to where a parser
    stops, both see the same strings, so the bounds below hold for everything the parser reads."""
    return _STRING.sub(b"", raw)


def _deepest(structure: bytes) -> int:
    brackets = structure.translate(None, _NOT_BRACKETS)
    return max(0, max(accumulate(map(_NESTING_STEP.__getitem__, brackets)), default=0))


def json_depth(raw: bytes) -> int:
    """Deepest nesting of `[`/`{` in `raw`, brackets inside strings ignored; no parsing, no recursion, linear."""
    return _deepest(_structure(raw))


def _value_count(structure: bytes) -> int:
    """How many values a document with this structure holds at most: one, plus one per comma and per opening
    bracket (every value but a container's first follows a comma)."""
    return 1 + structure.count(b",") + structure.count(b"[") + structure.count(b"{")


def _integer(token: str) -> int:
    if len(token) > MAX_JSON_NUMBER_CHARS:
        raise JsonRejected(f"number {token[:20]}... is longer than {MAX_JSON_NUMBER_CHARS} characters")
    return int(token)


def _decimal(token: str) -> Decimal:
    if len(token) > MAX_JSON_NUMBER_CHARS:
        raise JsonRejected(f"number {token[:20]}... is longer than {MAX_JSON_NUMBER_CHARS} characters")
    value = Decimal(token)
    if value and abs(value.adjusted()) > MAX_JSON_EXPONENT:
        raise JsonRejected(f"number {token} is outside 1e-{MAX_JSON_EXPONENT}..1e{MAX_JSON_EXPONENT}")
    return value


def _constant(name: str) -> None:
    raise JsonRejected(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        duplicated = sorted({key for key, _ in pairs if key in seen or seen.add(key)})
        raise JsonRejected(f"duplicate keys: {', '.join(duplicated)}")
    return value


def _check_strings(value: Any) -> None:
    """Refuse strings that are not valid Unicode (a `\\ud800` escape parses to a lone surrogate, which no
    UTF-8 encoder accepts later). Iterative, so depth costs no stack."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise JsonRejected("a string holds a lone surrogate (not valid Unicode)") from None


def load_untrusted_json(raw: bytes) -> Any:
    """Parse JSON a transaction carries, within this module's explicit limits: integers as `int`, numbers with
    a fraction or exponent as exact `Decimal` (never float). Raises `JsonRejected`, and nothing else, for any
    input."""
    if not isinstance(raw, (bytes, bytearray)):
        raise JsonRejected("JSON must be given as bytes")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise JsonRejected("not UTF-8") from None
    structure = _structure(bytes(raw))
    depth = _deepest(structure)
    if depth > MAX_JSON_DEPTH:
        raise JsonRejected(f"nested {depth} deep, limit {MAX_JSON_DEPTH}")
    values = _value_count(structure)
    if values > MAX_JSON_VALUES:
        raise JsonRejected(f"holds {values} values, limit {MAX_JSON_VALUES}")
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_decimal, parse_constant=_constant,
                           object_pairs_hook=_unique_keys)
    except JsonRejected:
        raise
    except ValueError as exc:  # json.JSONDecodeError, and int()/Decimal() on a token json.loads let through
        raise JsonRejected(f"not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(raw):
        _check_strings(value)
    return value


def _reject_floats(value: Any) -> None:
    if isinstance(value, float):
        raise TypeError("floats are not allowed in chain state")
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return
    for item in items:
        if type(item) not in FLOATLESS_TYPES:  # most items are: no call for each (a record holds hundreds)
            _reject_floats(item)


FLOATLESS_TYPES = frozenset((int, str, bool, type(None)))


def encode_u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


def decode_u64(raw: bytes) -> int:
    return int.from_bytes(raw, "big")
