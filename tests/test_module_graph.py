"""The module graph, read from the source: no file imports one that imports it back, and the verifier stays on
the protocol's core.

Every `import` and `from ... import` of a project module counts, wherever it is written (at the top, inside a
function, under `TYPE_CHECKING`), absolute (`trolly.compute.training`) or relative (`..training`): a circle
through a lazy import is still two files that cannot be read apart. `from package import name` is an edge to
the submodule `package.name` when there is one, and to the package otherwise.

The verifier replays with the protocol's core only: nothing it loads, directly or through what that imports
(each module's parent packages included, which Python runs first), is part of `compute.acceleration`, the
worker's speed-ups.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet", "console")
ACCELERATION = "trolly.compute.acceleration"


def module_files() -> dict[str, pathlib.Path]:
    """Every module of the project by its dotted name (`trolly.compute.training`), packages by their own."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = ["trolly", package, *path.relative_to(ROOT / package).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_project_modules(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The project modules `name` imports (see the module docstring for what counts)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:  # `import a.b.c` of a name inside a.b: the module a.b
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def project_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_project_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (a depth-first walk that meets a module on its own path)."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path = [root]
        stack = [iter(sorted(graph[root]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                stack.pop()
                done.add(path.pop())
            elif following in path:
                return path[path.index(following):] + [following]
            elif following not in done:
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_within_the_package(package):
    prefix = f"trolly.{package}"
    inside = {name: {t for t in targets if t == prefix or t.startswith(prefix + ".")}
              for name, targets in project_graph().items() if name == prefix or name.startswith(prefix + ".")}
    cycle = find_cycle(inside)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_reports_a_cycle_with_its_path():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def loaded_with(name: str, graph: dict[str, set[str]]) -> dict[str, str]:
    """Every module importing `name` loads, each with the module that brought it in."""
    came_from = {name: ""}
    waiting = [name]
    while waiting:
        current = waiting.pop()
        parents = [".".join(current.split(".")[:i]) for i in range(2, current.count(".") + 1)]
        for following in [*graph.get(current, ()), *parents]:
            if following in graph and following not in came_from:
                came_from[following] = current
                waiting.append(following)
    return came_from


def test_the_verifier_loads_nothing_of_the_compute_acceleration():
    graph = project_graph()
    for name in sorted(n for n in graph if n == "trolly.verifier" or n.startswith("trolly.verifier.")):
        came_from = loaded_with(name, graph)
        reached = sorted(n for n in came_from if n == ACCELERATION or n.startswith(ACCELERATION + "."))
        if reached:
            chain = [reached[0]]
            while came_from[chain[-1]]:
                chain.append(came_from[chain[-1]])
            pytest.fail("the verifier loads the worker's acceleration: " + " -> ".join(reversed(chain)))
