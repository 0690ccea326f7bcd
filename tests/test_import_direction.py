"""DESIGN section 1: the import direction between packages, and a pure `chain`."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

ALLOWED = {
    "chain": set(),
    "abci_app": {"chain"},
    "wallet": {"chain"},
    "compute": {"chain", "wallet"},
    "verifier": {"compute", "wallet", "chain"},
    "localnet": {"chain", "abci_app", "wallet", "compute", "verifier"},
}
FORBIDDEN_IN_CHAIN = {"asyncio", "torch", "plyvel", "aiohttp", "uvloop", "socket", "time", "random", "requests", "os"}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_the_design_allows(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[0] != "trolly" or len(parts) < 2:
                continue
            target = parts[1]
            assert target == package or target in ALLOWED[package], f"{path} imports {name}"


def test_chain_imports_no_io_clock_randomness_or_torch():
    for path in sorted((ROOT / "chain").rglob("*.py")):
        for name in imported_modules(path):
            assert name.split(".")[0] not in FORBIDDEN_IN_CHAIN, f"{path} imports {name}"
