"""No dead code: every function and method of the product is called from somewhere (the product, its tests or its
benchmarks), as vulture finds by reading the source.

The scan runs in a fresh interpreter (`python tests/project/test_no_dead_code.py` prints what it finds), not in the
test process: CPython 3.11 keeps the AST constructor's recursion counter in interpreter-wide state, so an
`ast.parse` in another thread while vulture parses (3.11 tracebacks parse source lines to place their carets,
so any leftover thread of an earlier test that formats one will do) corrupts the count and vulture fails
with "SystemError: AST constructor recursion depth mismatch". The test runs the scan while this process does
exactly that, so it shows the scan no longer depends on what ran before it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet", "console")
USERS = ("tests", "benchmarks")

ENTRY_DECORATORS = ["@*.command", "@*.group", "@click.*", "@register_cheat", "@pytest.hookimpl"]
"""Functions that frameworks call, found by their decorators: click commands and groups, registered cheats,
pytest hooks."""
ENTRY_NAMES = ["__getattr__"]
"""Module-level `__getattr__` (lazy imports) is called by Python itself."""
GENERATED = ["*_pb2.py", "*/proto/*"]


def unused_code() -> list[str]:
    import vulture

    scan = vulture.Vulture(ignore_names=ENTRY_NAMES, ignore_decorators=ENTRY_DECORATORS)
    scan.scavenge([str(ROOT / name) for name in PRODUCT + USERS], exclude=GENERATED)
    product = tuple(str(ROOT / name) + "/" for name in PRODUCT)
    return [f"{Path(item.filename).relative_to(ROOT)}:{item.first_lineno} {item.typ} {item.name}"
            for item in scan.unused_funcs + scan.unused_methods
            if str(item.filename).startswith(product) and item.confidence >= 60]


def _format_tracebacks_until(stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            {}["missing"]
        except KeyError:
            traceback.format_exc()


def test_every_function_and_method_of_the_product_is_used_somewhere():
    stop = threading.Event()
    noisy_neighbour = threading.Thread(target=_format_tracebacks_until, args=(stop,), daemon=True)
    noisy_neighbour.start()
    try:
        scan = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
        noisy_neighbour.join()
    assert scan.returncode == 0, scan.stderr
    unused = json.loads(scan.stdout)
    assert unused == [], "unused code (remove it, or name the framework that calls it here):\n" + "\n".join(unused)


if __name__ == "__main__":
    print(json.dumps(unused_code()))
