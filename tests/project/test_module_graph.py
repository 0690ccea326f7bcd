"""The module graph, read from the source: no file imports one that imports it back, no import path leaves a
folder and comes back into it, and the verifier stays on the protocol's core.

Every `import` and `from ... import` of a project module counts, wherever it is written (at the top, inside a
function, under `TYPE_CHECKING`), absolute (`trolly.compute.training`) or relative (`..training`): a circle
through a lazy import is still two files that cannot be read apart. `from package import name` is an edge to
the submodule `package.name` when there is one, and to the package otherwise. A module named in a string is
imported too, later: a "module:attribute" string (the wallet CLI's lazily loaded commands,
`wallet/cli/lazy_commands.py`), a whole dotted name (the console scripts' `run_pinned` targets, a `python -m`
child) and, in a package's `__init__`, a ".submodule" string (its lazy re-exports). A string naming one of the
file's own packages is not an edge: Python loads those before the file anyway, and the loggers' names look
like them.

Folders: while a folder is checked it counts as one node, its files and subfolders together; so does every
other folder's own files (its subfolders apart), except the folders it sits in, whose files count one by one.
A path out of the folder and back into it is a circle, which the file graph alone does not see: two sibling
folders each importing the other (`chain/market/module.py` named every handler of `chain/messages/`, whose
handlers import `chain/market/`), whichever files do it. A folder and the folder it sits in may import each
other file by file: `chain/app.py` imports `chain/modules/` and the modules import `chain/state.py`, but
nothing under `chain/modules/` leads back to `chain/app.py`, so each can be read apart; every package keeps
its entry point (`chain/app.py`, `abci_app/cli.py`, `compute/training.py`) at its root beside the files its
subfolders build on, and counting that root as one node would forbid the layout itself. A subfolder file that
leads to its parent's `__init__` which re-exports from that subfolder is still a circle. The top-level
packages are not checked as folders: their order is tests/project/test_import_direction.py's, whose one exception
(the wallet CLI names commands of `compute`, which imports the wallet library) makes `wallet` and `compute`,
taken whole, reach each other by design; a lazily loaded command that imports the wallet CLI back is caught
here, between `wallet/cli/` and its folder.

The verifier replays with the protocol's core only: nothing it loads, directly or through what that imports
(each module's parent packages included, which Python runs first), is part of `compute.acceleration`, the
worker's speed-ups.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet", "console")
ACCELERATION = "trolly.compute.acceleration"
NAMED_MODULE = re.compile(r"(trolly(?:\.\w+)+)(?::\w+)?|(\.\w+)")
"""A string that may name a module: "trolly.a.b", "trolly.a.b:attribute", or ".b" (relative, in an `__init__`)."""


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
    return targets | modules_named_in_strings(name, path, tree, modules)


def modules_named_in_strings(name: str, path: pathlib.Path, tree: ast.AST, modules: dict[str, pathlib.Path]) -> set[str]:
    """The project modules `name` names in a string to import later (see the module docstring for which)."""
    own_packages = {".".join(name.split(".")[:i]) for i in range(2, name.count(".") + 1)} | {name}
    targets = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        match = NAMED_MODULE.fullmatch(node.value)
        if match is None:
            continue
        absolute, relative = match.groups()
        target = absolute if absolute else (name + relative if path.name == "__init__.py" else None)
        if target in modules and target not in own_packages:
            targets.add(target)
    return targets


@functools.cache
def project_graph() -> dict[str, frozenset[str]]:
    """Every project module and the project modules it imports, read once for all the tests here."""
    modules = module_files()
    return {name: frozenset(imported_project_modules(name, path, modules)) for name, path in modules.items()}


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


def folders(graph) -> set[str]:
    """Every folder below a top-level package (`trolly.chain.market`), by its dotted name."""
    return {name.rpartition(".")[0] for name in graph if name.count(".") >= 3}


def inside(name: str, folder: str) -> bool:
    """Whether module `name` is `folder`'s package or lies under it."""
    return name == folder or name.startswith(folder + ".")


def unit(name: str, folder: str, packages: set[str]) -> str:
    """The node `name` counts as while `folder` is checked: the folder itself for everything in it, the module
    itself when it is a file of a folder `folder` sits in, and otherwise its own folder (its files, not its
    subfolders), written with a trailing "/"."""
    if inside(name, folder):
        return folder + "/"
    own = name if name in packages else name.rpartition(".")[0]
    return name if inside(folder, own) else own + "/"


def path_out_and_back(folder: str, graph) -> list[tuple[str, str]] | None:
    """A shortest way out of `folder` and back in (see the module docstring), one import `(importer, imported)`
    for each step between nodes, or None (a breadth-first walk from the folder)."""
    packages = {name.rpartition(".")[0] for name in graph}
    steps: dict[str, dict[str, tuple[str, str]]] = {}
    for name in sorted(graph):
        for target in sorted(graph[name]):
            here, there = unit(name, folder, packages), unit(target, folder, packages)
            if here != there:
                steps.setdefault(here, {}).setdefault(there, (name, target))
    start = folder + "/"
    came_from = {start: ""}
    waiting = [start]
    for current in waiting:  # grows while it is walked: breadth first
        for following in sorted(steps.get(current, {})):
            if following == start:
                nodes = [current, start]
                while came_from[nodes[0]]:
                    nodes.insert(0, came_from[nodes[0]])
                return [steps[here][there] for here, there in zip(nodes, nodes[1:])]
            if following not in came_from:
                came_from[following] = current
                waiting.append(following)
    return None


def test_no_import_path_leaves_a_folder_and_comes_back():
    graph = project_graph()
    circles = {folder: path_out_and_back(folder, graph) for folder in sorted(folders(graph))}
    found = [f"{folder}: " + ", ".join(f"{a} -> {b}" for a, b in steps) for folder, steps in circles.items() if steps]
    assert not found, "import paths out of a folder and back into it:\n" + "\n".join(found)


def test_the_folder_check_sees_two_folders_importing_each_other_not_a_parent_below_and_above_its_subfolder():
    graph = {"t.p.app": {"t.p.sub.a"}, "t.p.sub.a": {"t.p.state", "t.p.other.x"}, "t.p.state": set(),
             "t.p.other.x": set(), "t.p.other.y": {"t.p.sub.b"}, "t.p.sub.b": set()}
    assert path_out_and_back("t.p.sub", graph) == [("t.p.sub.a", "t.p.other.x"), ("t.p.other.y", "t.p.sub.b")]
    assert path_out_and_back("t.p.other", graph) == [("t.p.other.y", "t.p.sub.b"), ("t.p.sub.a", "t.p.other.x")]
    graph["t.p.other.y"] = set()
    assert path_out_and_back("t.p.sub", graph) is None
    graph["t.p.state"] = {"t.p.app"}
    assert path_out_and_back("t.p.sub", graph) == [("t.p.sub.a", "t.p.state"), ("t.p.state", "t.p.app"),
                                                   ("t.p.app", "t.p.sub.a")]
    graph["t.p.state"] = set()
    graph["t.p"] = {"t.p.sub.a"}  # the parent's `__init__` re-exports from the subfolder: fine...
    assert path_out_and_back("t.p.sub", graph) is None
    graph["t.p.sub.b"] = {"t.p"}  # ...unless the subfolder imports it back
    assert path_out_and_back("t.p.sub", graph) == [("t.p.sub.b", "t.p"), ("t.p", "t.p.sub.a")]


def test_strings_that_name_modules_are_edges(tmp_path):
    modules = {"trolly.w.cli": tmp_path / "cli.py", "trolly.w.cli.task": tmp_path / "task.py",
               "trolly.c.req": tmp_path / "req.py", "trolly.c.req.client": tmp_path / "client.py"}
    source = ('GROUPS = {"task": "trolly.w.cli.task:task", "data": "trolly.c.req:data"}\n'
              'LOGGER = "trolly.w.cli"\nLAZY = {"Client": ".client"}\nWORDS = "trolly.c.req is named in a sentence"\n')
    tree = ast.parse(source)
    assert modules_named_in_strings("trolly.w.cli.task", tmp_path / "task.py", tree, modules) == {"trolly.c.req"}
    assert modules_named_in_strings("trolly.c.req", tmp_path / "req.py", tree, modules) == {
        "trolly.w.cli.task", "trolly.w.cli"}
    assert modules_named_in_strings("trolly.c.req", tmp_path / "__init__.py", tree, modules) == {
        "trolly.w.cli.task", "trolly.w.cli", "trolly.c.req.client"}


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
