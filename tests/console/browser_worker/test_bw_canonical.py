"""Canonical tensor bytes in JavaScript (compute/wasm/canonical.mjs, the browser worker's canonical.js) against
compute/canonical.py: every dtype decodes to the same tensors and encodes back to the same bytes, and on
thousands of damaged byte strings the two accept and refuse the same ones, with the same words (a shard one side
reads and the other refuses would split the workers of a task)."""

from __future__ import annotations

import hashlib
import json
import random
import re
import struct

import pytest
import torch

from bw_data_helpers import AVAILABLE, SKIP_REASON, run_script
from trolly.compute.canonical import decode_tensors, encode_tensors, read_entries
from trolly.compute.errors import EncodingError

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=SKIP_REASON)

TENSORS = {
    "inputs": torch.tensor([[0.0, -0.0, 1.5], [float("inf"), 1e-40, -3.25]], dtype=torch.float32),
    "half": torch.tensor([1.0, -2.5, 65504.0, 6e-8], dtype=torch.float16),
    "scalar": torch.tensor(3.141592653589793, dtype=torch.float64),
    "targets": torch.tensor([[0, -1], [2**62, -(2**63)]], dtype=torch.int64),
    "ints": torch.tensor([7, -2**31, 2**31 - 1], dtype=torch.int32),
    "empty": torch.zeros((0, 5), dtype=torch.uint8),
    "bytes": torch.tensor([0, 255, 128], dtype=torch.uint8),
    "signed": torch.tensor([-128, 127, 0], dtype=torch.int8),
    "": torch.zeros((), dtype=torch.float32),
    "weights/é/α": torch.ones((1, 1, 1, 1, 1, 1, 1, 1), dtype=torch.float32),
}


def entry(name: bytes, code: int, shape: tuple[int, ...], data: bytes = b"") -> bytes:
    return struct.pack("<H", len(name)) + name + struct.pack("<BB", code, len(shape)) + \
        b"".join(struct.pack("<Q", size) for size in shape) + data


def document(*entries: bytes, count: int | None = None, version: int = 1) -> bytes:
    return b"TRLT" + struct.pack("<BI", version, len(entries) if count is None else count) + b"".join(entries)


def crafted() -> list[bytes]:
    """One byte string per rule of `read_entries`, and a few it allows."""
    four = struct.pack("<4f", 1, 2, 3, 4)
    return [
        b"", b"TRL", b"XRLT" + bytes(5), document(version=2), document(count=1000), document(),
        document(entry(b"a", 1, (4,), four)), document(entry(b"a", 1, (4,), four) + b"\x00"),
        document(entry(b"b", 1, (1,), four[:4]), entry(b"a", 1, (1,), four[:4])),
        document(entry(b"a", 1, (1,), four[:4]), entry(b"a", 1, (1,), four[:4])),
        document(entry(b"a", 9, (1,), four[:4])), document(entry(b"a", 1, (1,) * 9, four[:4])),
        document(entry(b"a", 1, (2**31 + 1,))), document(entry(b"a", 6, (2**31,))),
        document(entry(b"a", 6, (0, 2**63))), document(entry(b"a", 6, (0, 2**31))),
        document(entry(b"\xff", 6, (1,), b"\x01")), document(entry(b"\xed\xa0\x80", 6, (1,), b"\x01")),
        document(entry(b"\xef\xbb\xbfbom", 6, (1,), b"\x01")), document(entry(b"a", 1, (4,), four[:15])),
        document(entry(b"\xff", 6, (1,), b"\x01"), entry(b"\xff\xff", 6, (9,), b"")),
        document(entry(b"ab", 1, (4,), four))[:-17],
    ]


def damaged(valid: bytes, count: int, seed: int) -> list[bytes]:
    """`valid` cut short at every length of its first 160 bytes, and with random bytes changed."""
    rng = random.Random(seed)
    cases = [valid[:length] for length in range(min(len(valid), 160))]
    for _ in range(count):
        data = bytearray(valid)
        for _ in range(rng.choice([1, 1, 2, 3])):
            at = rng.randrange(min(len(data), 200)) if rng.random() < 0.8 else rng.randrange(len(data))
            data[at] = rng.choice([0, 1, 2, 8, 9, 0x7f, 0x80, 0xff, rng.randrange(256)])
        cases.append(bytes(data))
    return cases


def same_words(result: dict) -> dict:
    """`result` with a quoted tensor name in its message made one placeholder: Python quotes a name with `repr`,
    whose escapes JavaScript need not copy; the message around it is compared."""
    if "message" not in result:
        return result
    return {**result, "message": re.sub(r"tensor ('.*'|\".*\")", "tensor <name>", result["message"], flags=re.S)}


def python_view(data: bytes) -> dict:
    """What compute/canonical.py makes of `data`, in the script's form."""
    try:
        read_entries(data)
        tensors = decode_tensors(data)
    except EncodingError as error:
        return {"ok": False, "message": str(error)}
    listed = []
    for name, tensor in tensors.items():
        array = tensor.numpy()
        dtype = str(tensor.dtype).removeprefix("torch.")
        listed.append([name, dtype, list(tensor.shape), hashlib.sha256(array.astype(array.dtype.newbyteorder("<"))
                                                                       .tobytes()).hexdigest()])
    return {"ok": True, "tensors": listed, "again": True}


def test_javascript_decodes_and_refuses_canonical_bytes_as_python_does(tmp_path):
    valid = encode_tensors(TENSORS)
    cases = [valid, *crafted(), *damaged(valid, 2500, seed=37)]
    file = tmp_path / "cases.json"
    file.write_text(json.dumps([case.hex() for case in cases]))
    results = run_script("decode_canonical.mjs", {"file": str(file)})
    expected = [python_view(case) for case in cases]
    assert results[0] == expected[0] and len(results[0]["tensors"]) == len(TENSORS)
    for case, result, wanted in zip(cases, results, expected):
        if not wanted["ok"] and wanted["message"].startswith("truncated canonical tensor bytes"):
            assert not result["ok"] and result["message"].startswith("truncated canonical tensor bytes"), case.hex()
            continue  # struct's own words follow the prefix in Python
        assert same_words(result) == same_words(wanted), case.hex()
    accepted = sum(wanted["ok"] for wanted in expected)
    assert 100 < accepted < len(cases) - 500  # both kinds well represented
