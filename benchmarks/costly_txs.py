"""Transactions built to be as expensive as possible to check: the adversarial corpus of `benchmarks.fuzz_chain`.

A stranger pays nothing for a transaction that CheckTx refuses, so the most a node can be made to spend on one
is what its stateless and early stateful checks cost on the worst bytes that fit. Every transaction here is of
the maximum size (`AuthParams.max_tx_bytes`) and carries task specs of the maximum size
(`MarketParams.max_spec_bytes`): three valid specs padded out with the costliest content a valid spec may hold
(sixteen dataset URLs as long as fit, full of percent escapes), which pass and escrow in the mempool
overlay so that the fourth is read too, then one costly spec that fails only after it has been read:

- escaped_quotes_unclosed: a string of `\\"` escapes that never closes (what a backtracking string pattern
  rescans from every quote);
- escapes_in_strings, brackets_in_strings: strings of every escape and of quotes and brackets;
- long_key, many_keys, duplicate_key_last: one key of the whole size; as many keys as the value bound allows;
  the same, with the duplicate last;
- many_numbers: numbers of the longest length allowed, with fractions and exponents at the limit;
- deep_allowed: nesting at the depth limit, over and over, up to the value bound;
- surrogate_pairs: escaped surrogate pairs, with a lone one at the very end;
- too_many_values: one value more than the bound allows, in the fewest bytes.

The fourth message failing rolls the whole transaction back, so its nonce stays free and the same bytes can be
checked again and again (a refused transaction is not remembered by the memo of passed checks).
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

from trolly.chain.codec import MAX_JSON_DEPTH, MAX_JSON_NUMBER_CHARS, MAX_JSON_VALUES
from trolly.chain.market.params import MarketParams
from trolly.chain.market.spec import MAX_DATASET_URLS
from trolly.chain.market.urls import MAX_URL_BYTES
from trolly.chain.params import AuthParams
from trolly.chain.proto import market_pb2

from .hostile_txs import SPEC

SPEC_BYTES = MarketParams.localnet().max_spec_bytes
TX_BYTES = AuthParams().max_tx_bytes
VALID_SPECS_FIRST = 3
"""Valid specs before the costly one: as many as fit beside it in a transaction of the maximum size."""
MEMO = "m" * AuthParams().max_memo_bytes
TERMS = dict(budget=10**12, workers=1, rounds=SPEC["training"]["rounds"], reward_per_round=1_000_000,
             collateral=10**9, join_blocks=10, round_blocks=5, samples_per_worker=1)
"""Terms the fuzz genesis's market accepts, so that the valid specs' submissions succeed in the overlay."""


def _padded(head: bytes, unit: bytes, tail: bytes, size: int) -> bytes:
    """`head`, as many `unit`s as fit, `tail`: at most `size` bytes."""
    return head + unit * max(0, (size - len(head) - len(tail)) // len(unit)) + tail


def _spec_text() -> str:
    return json.dumps(SPEC, separators=(",", ":"))


def _with_extra_field(value_head: bytes, unit: bytes, value_tail: bytes, size: int) -> bytes:
    """The valid spec with one more field at its end, whose value is `value_head unit... value_tail`: the whole
    document is read before the schema refuses the field."""
    text = _spec_text().encode()
    return _padded(text[:-1] + b',"x":' + value_head, unit, value_tail + b"}", size)


def _keys(count: int, size: int, duplicate_last: bool) -> bytes:
    head = _spec_text().encode()[:-1]
    room = size - len(head) - 1 - count * len(b',"":0')
    width = max(1, room // count)
    keys = [b"%0*d" % (width, index) for index in range(count)]
    if duplicate_last:
        keys[-1] = keys[0]
    return head + b"".join(b',"' + key + b'":0' for key in keys) + b"}"


def valid_max_spec(size: int = SPEC_BYTES) -> bytes:
    """A spec the chain accepts, padded to `size` bytes with what costs most to check in a valid one: the
    largest number of dataset URLs, each as long as the room allows and its path all percent escapes (each
    character of a URL is checked, a percent with the two that follow it), and spaces for what is left over."""
    spec = json.loads(json.dumps(SPEC))
    spec["dataset"]["urls"] = []
    room = size - len(json.dumps(spec, separators=(",", ":")).encode())
    head = "http://h.example/"
    escapes = (min(MAX_URL_BYTES, room // MAX_DATASET_URLS - 3) - len(head)) // 3
    spec["dataset"]["urls"] = [head + "%41" * escapes] * MAX_DATASET_URLS
    return json.dumps(spec, separators=(",", ":")).encode().ljust(size, b" ")


COSTLY_SPECS: dict[str, Callable[[int], bytes]] = {
    "escaped_quotes_unclosed": lambda size: _padded(b'{"codec":"', b'\\"', b"", size),
    "escapes_in_strings": lambda size: _with_extra_field(b'"', b'\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041', b'"', size),
    "brackets_in_strings": lambda size: _with_extra_field(b'["', b'[{\\"}],:', b'"]', size),
    "long_key": lambda size: _with_extra_field(b'{"', b"k", b'":0}', size),
    "many_keys": lambda size: _keys(MAX_JSON_VALUES - 40, size, duplicate_last=False),
    "duplicate_key_last": lambda size: _keys(MAX_JSON_VALUES - 40, size, duplicate_last=True),
    "many_numbers": lambda size: _with_extra_field(
        b"[", b"-0." + b"1" * (MAX_JSON_NUMBER_CHARS - 7) + b"e-10,", b"0]", size),
    "deep_allowed": lambda size: _with_extra_field(
        b"[", b"[" * (MAX_JSON_DEPTH - 2) + b'"' + b"s" * 300 + b'"' + b"]" * (MAX_JSON_DEPTH - 2) + b",",
        b"0]", size),
    "surrogate_pairs": lambda size: _with_extra_field(b'"', b"\\ud83d\\ude00", b'\\ud800"', size),
    "too_many_values": lambda size: b"[" + b",".join([b"0"] * MAX_JSON_VALUES) + b"]",
}
"""Each costly spec by name, built to at most the given size; each fails only after it has been read."""


def submit_task(spec: bytes) -> market_pb2.MsgSubmitTask:
    return market_pb2.MsgSubmitTask(spec=spec, spec_hash=hashlib.sha256(spec).digest(), **TERMS)


def costly_messages(name: str) -> list[market_pb2.MsgSubmitTask]:
    """The messages of the corpus transaction `name`: the valid specs, then the costly one sized to fill the
    transaction to its maximum."""
    valid = [submit_task(valid_max_spec()) for _ in range(VALID_SPECS_FIRST)]
    used = sum(len(message.SerializeToString()) + 8 for message in valid) + len(MEMO) + 300
    room = min(SPEC_BYTES, TX_BYTES - used - 120)
    return valid + [submit_task(COSTLY_SPECS[name](room))]
