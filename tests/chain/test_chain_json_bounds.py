"""The bounded JSON reader's checks are linear in the document's length: `json_depth` agrees with a plain
character-by-character lexer (the reference below) on any bytes, including the documents built to make a
backtracking string pattern rescan the rest of the input from every quote, and a document's value count is
bounded before any per-value hook runs. (How fast they are is measured by `python -m benchmarks.fuzz_chain`, not
here.)"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trolly.chain.codec import MAX_JSON_DEPTH, MAX_JSON_VALUES, JsonRejected, json_depth, load_untrusted_json


def reference_json_depth(raw: bytes) -> int:
    """Deepest bracket nesting as a JSON lexer reads `raw`: one pass, a quote opens a string that a backslash
    escapes one character in and the next quote (or the end) closes; brackets count only outside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                in_string = False
        elif byte == ord('"'):
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='"\\[]{}:,ab\u00e9\U0001f600'),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(alphabet='"\\[]{}ab', max_size=6), children, max_size=4),
    max_leaves=30)

TRICKY_BYTES = st.binary(max_size=200) | st.lists(
    st.sampled_from([b'"', b"\\", b'\\"', b"\\\\", b"[", b"]", b"{", b"}", b",", b":", b"a", b" "]),
    max_size=120).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_json_depth_agrees_with_a_lexer_on_valid_documents(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_depth(raw) == reference_json_depth(raw)


@settings(max_examples=500, deadline=None)
@given(TRICKY_BYTES)
def test_json_depth_agrees_with_a_lexer_on_any_bytes(raw):
    assert json_depth(raw) == reference_json_depth(raw)


@pytest.mark.parametrize("document, depth", [
    (b'"' + b'\\"' * 20_000 + b"[[[", 0),  # one string never closed: what used to be rescanned from every quote
    (b'["' + b'\\"' * 20_000 + b'", [[1]]]', 3),
    (b'"' + b"\\" * 40_001 + b"[[", 0),  # the last backslash escapes the first bracket; still one open string
    (b'"a\\', 0),
])
def test_json_depth_reads_a_string_left_open_to_the_end_as_a_parser_does(document, depth):
    assert json_depth(document) == reference_json_depth(document) == depth


def test_a_document_whose_string_is_never_closed_is_refused():
    with pytest.raises(JsonRejected, match="not valid JSON"):
        load_untrusted_json(b'{"a": "' + b'\\"' * 8_000 + b"[[[[")


def commas(count: int) -> bytes:
    return b"[" + b",".join([b"0"] * count) + b"]"


def test_a_document_of_exactly_the_value_limit_is_read_and_one_more_is_refused():
    assert len(load_untrusted_json(commas(MAX_JSON_VALUES - 1))) == MAX_JSON_VALUES - 1  # the list is a value too
    with pytest.raises(JsonRejected, match=f"holds {MAX_JSON_VALUES + 1} values"):
        load_untrusted_json(commas(MAX_JSON_VALUES))


def test_commas_brackets_and_colons_inside_strings_are_not_values():
    text = ",[{:" * MAX_JSON_VALUES
    assert load_untrusted_json(json.dumps({"k": text}).encode()) == {"k": text}


def test_many_empty_objects_are_refused_before_any_object_is_built():
    with pytest.raises(JsonRejected, match="values"):
        load_untrusted_json(b"[" + b"{}," * 5_000 + b"{}]")


def test_a_document_nested_exactly_to_the_limit_is_read():
    document = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert json_depth(document) == MAX_JSON_DEPTH
    load_untrusted_json(document)
