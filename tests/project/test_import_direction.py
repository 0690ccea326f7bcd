"""docs/architecture.md section 1: the import direction between packages, and a pure `chain`."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

ALLOWED = {
    "chain": set(),
    "abci_app": {"chain"},
    "wallet": {"chain"},
    "compute": {"chain", "wallet"},
    "verifier": {"compute", "wallet", "chain"},
    "localnet": {"chain", "abci_app", "wallet", "compute", "verifier"},
    "console": {"chain", "wallet", "compute"},
}
EXCEPTIONS = {"abci_app": {"trolly.wallet.files", "trolly.wallet.metrics_endpoint"}}
"""Single modules a package may import beyond ALLOWED. `trolly.wallet.files` is the project's one atomic,
power-loss-safe file writer; `chain` may do no I/O, so it lives in the wallet, and the node home (abci_app)
writes through it. `trolly.wallet.metrics_endpoint` is the one way a process serves its Prometheus metrics, shared
by the node, the worker and the verifier for the same reason. Neither imports anything from the project (tested
below), so the exception brings nothing else in."""
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
            allowed = target == package or target in ALLOWED[package] or name in EXCEPTIONS.get(package, set())
            assert allowed, f"{path} imports {name}"


def test_chain_imports_no_io_clock_randomness_or_torch():
    for path in sorted((ROOT / "chain").rglob("*.py")):
        for name in imported_modules(path):
            assert name.split(".")[0] not in FORBIDDEN_IN_CHAIN, f"{path} imports {name}"


@pytest.mark.parametrize("name", ["files.py", "metrics_endpoint.py", "__init__.py"])  # importing a leaf runs the package's __init__
def test_the_leaves_the_node_imports_from_the_wallet_import_nothing_from_the_project(name):
    path = ROOT / "wallet" / name
    tree = ast.parse(path.read_text(), filename=str(path))
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert not relative, f"wallet/{name} must not import from its package"
    assert not {module for module in imported_modules(path) if module.split(".")[0] == "trolly"}


def test_an_exception_names_one_module_not_its_package():
    assert all(name.count(".") >= 2 for names in EXCEPTIONS.values() for name in names)


LAZY_COMPUTE_TARGETS = {
    "trolly.compute.requester.cli:data",
    "trolly.compute.requester.cli:fetch",
    "trolly.compute.requester.cli:evaluate_command",
    "trolly.compute.requester.cli:prepare_data_submission",
    "trolly.compute.requester.model_cli:model",
}
"""The one documented exception to `wallet imports only chain`: the requester's commands that need torch and the
blob service (`trolly-wallet data`, `task fetch`, `task eval`, `task submit --data`, `model predict`) live in
`compute.requester.cli` (and `model_cli`) and the wallet's CLI names them as "module:attribute" strings, imported on first use
(`wallet/cli/lazy_commands.py`), so no wallet module imports compute and `trolly-wallet keys` never loads torch."""


def test_the_wallet_names_compute_only_in_its_documented_lazy_commands():
    named = set()
    for path in sorted((ROOT / "wallet").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("trolly.compute"):
                named.add(node.value)
    assert named == LAZY_COMPUTE_TARGETS


def test_a_command_the_wallet_cli_loads_by_name_imports_nothing_of_the_wallet_cli_back():
    """The circle no import test saw: `wallet/cli` names `compute.requester.cli` by a string, and that module
    imported the wallet CLI's errors, options, output and task settings back. What both need lives below both
    (`wallet/command_line/`, `wallet/requester.py`); nothing a lazy command loads is under `wallet/cli/`."""
    from test_module_graph import loaded_with, project_graph

    graph = project_graph()
    for target in sorted(LAZY_COMPUTE_TARGETS):
        module = target.partition(":")[0]
        came_from = loaded_with(module, graph)
        back = sorted(name for name in came_from
                      if name == "trolly.wallet.cli" or name.startswith("trolly.wallet.cli."))
        assert not back, f"{module} loads {back[0]} of the wallet CLI that names it (through {came_from[back[0]]})"
