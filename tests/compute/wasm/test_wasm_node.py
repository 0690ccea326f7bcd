"""The kernel in Node.js: the committed vector gives its hash from the .wasm and from the JavaScript fallback,
the fallback matches the .wasm bit for bit well beyond the vector, and the JS SHA-256 is SHA-256."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from wasm_helpers import NODE, ROOT, VECTOR, run_node

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")


@pytest.mark.parametrize("kind", ["wasm", "js"])
def test_node_trains_the_vector_to_its_hash(kind):
    expected = json.loads(VECTOR.read_text())["expected"]
    result = run_node(VECTOR, kind)
    assert result["hash"] == expected["hash"]
    assert result["losses"] == expected["losses"]


def test_the_javascript_fallback_matches_the_wasm_bit_for_bit_on_random_models():
    """exp and log on 600,000 floats (every kind of bit pattern), then 60 random models, data and
    hyperparameters (some diverging to NaN), every float of the state compared after every step."""
    done = subprocess.run([NODE, "tests/compute/wasm/compare_kernels.mjs", "60"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    checked = json.loads(done.stdout)["checked"]
    assert checked["models"] == 60 and checked["steps"] > 300 and checked["nans"] > 0


def test_the_javascript_sha256_is_sha256():
    lengths = [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 1 << 20]
    script = ("import { sha256, toHex } from './compute/wasm/sha256.mjs';"
              "const lengths = JSON.parse(process.argv[1]);"
              "console.log(JSON.stringify(lengths.map((n) => toHex(sha256(Uint8Array.from({length: n}, "
              "(_, i) => (i * 131 + 7) % 256))))));")
    done = subprocess.run([NODE, "--input-type=module", "-e", script, json.dumps(lengths)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    expected = [hashlib.sha256(bytes((i * 131 + 7) % 256 for i in range(n))).hexdigest() for n in lengths]
    assert json.loads(done.stdout) == expected
