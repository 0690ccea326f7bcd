"""docs/architecture.md section 7 names every file of the product packages, and only files that exist.

The map is what a newcomer walks first; a file added, renamed or deleted without its line there would make it
quietly wrong, so this test keeps it in step with the tree.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet", "console")
MAP = ROOT / "docs" / "architecture.md"
NAMED_FILE = re.compile(r"`((?:" + "|".join(PACKAGES) + r")/[\w/]+\.py)`")


def product_files() -> set[str]:
    return {path.relative_to(ROOT).as_posix() for package in PACKAGES for path in (ROOT / package).rglob("*.py")
            if "__pycache__" not in path.parts}


def test_every_product_file_has_its_line_in_the_architecture_map():
    named = set(NAMED_FILE.findall(MAP.read_text()))
    missing = sorted(product_files() - named)
    assert not missing, f"docs/architecture.md section 7 has no line for: {', '.join(missing)}"


def test_the_architecture_map_names_no_file_that_does_not_exist():
    named = set(NAMED_FILE.findall(MAP.read_text()))
    stale = sorted(named - product_files())
    assert not stale, f"docs/architecture.md names files that do not exist: {', '.join(stale)}"
