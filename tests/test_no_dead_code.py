"""No dead code: every function and method of the product is called from somewhere (the product, its tests or its
benchmarks), as vulture finds by reading the source."""

from __future__ import annotations

from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet")
USERS = ("tests", "benchmarks")

ENTRY_DECORATORS = ["@*.command", "@*.group", "@click.*", "@register_cheat"]
"""Functions that frameworks call, found by their decorators: click commands and groups, registered cheats."""
ENTRY_NAMES = ["__getattr__"]
"""Module-level `__getattr__` (lazy imports) is called by Python itself."""
GENERATED = ["*_pb2.py", "*/proto/*"]


def test_every_function_and_method_of_the_product_is_used_somewhere():
    scan = vulture.Vulture(ignore_names=ENTRY_NAMES, ignore_decorators=ENTRY_DECORATORS)
    scan.scavenge([str(ROOT / name) for name in PRODUCT + USERS], exclude=GENERATED)
    product = tuple(str(ROOT / name) + "/" for name in PRODUCT)
    unused = [f"{Path(item.filename).relative_to(ROOT)}:{item.first_lineno} {item.typ} {item.name}"
              for item in scan.unused_funcs + scan.unused_methods
              if str(item.filename).startswith(product) and item.confidence >= 60]
    assert unused == [], "unused code (remove it, or name the framework that calls it here):\n" + "\n".join(unused)
