"""Which unproven chain reads the display code reaches: a static call graph of the wallet, the console and the
compute library, followed from each function of the display modules (the wallet's CLI commands, the console's
pages and APIs) to every function that reads the store unproven or asks CometBFT's indexes.

An unproven store read is a use of the RPC client's `query_json` or `abci_query` without `prove=True`; a proven one
goes through `wallet.proofs.prove_answer`, which asks with `prove=True`. CometBFT reads are `tx_search`, `find_tx`
(its transaction index) and `validators` (its validator set). `status` and `block` are not followed: their names
are too common to tell apart statically; the tests say where they are shown.

Calls are resolved by what a module imports and defines (`from .x import f`, `module.f`, `self.method`); a class
named is taken to reach all its methods. A walk from an entry stops at another entry (that one is audited on its
own), so each finding names the display function that shows the read and the function that makes it.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass, field

UNPROVEN_STORE = {"query_json", "abci_query"}
COMETBFT = {"tx_search", "find_tx", "validators"}


@dataclass
class Unit:
    """A top-level function, or a method, of one module."""

    name: str
    node: ast.AST
    module: "Module"
    cls: str | None = None


@dataclass
class Module:
    name: str
    """`trolly.wallet.proofs`."""
    path: str
    """`wallet/proofs.py`, relative to the repository."""
    tree: ast.Module
    units: dict[str, Unit] = field(default_factory=dict)
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Local name -> (module, name in it) or (module, None) for a module imported whole."""


def module_name(relative: pathlib.Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["trolly", *parts])


def load(root: pathlib.Path, packages: list[str], skip: set[str]) -> dict[str, Module]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if str(relative) in skip or "/proto/" in str(relative) or "node_modules" in relative.parts:
                continue
            module = Module(module_name(relative), str(relative), ast.parse(path.read_text(), filename=str(path)))
            _index(module, relative.name == "__init__.py")
            modules[module.name] = module
    return modules


def _index(module: Module, is_package: bool) -> None:
    package = module.name if is_package else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module.imported[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.units[node.name] = Unit(node.name, node, module)
        elif isinstance(node, ast.ClassDef):
            module.units[node.name] = Unit(node.name, node, module)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    module.units[f"{node.name}.{item.name}"] = Unit(item.name, item, module, node.name)


def label(unit: Unit) -> str:
    return f"{unit.module.path}:{unit.cls + '.' if unit.cls else ''}{unit.name}"


def _lookup(modules: dict[str, Module], module: str, name: str) -> list[Unit]:
    found = modules.get(module)
    if found is None:
        return []
    unit = found.units.get(name)
    if unit is None and name in found.imported:  # re-exported by a package's __init__
        target, inner = found.imported[name]
        return _lookup(modules, target, inner) if inner else []
    if unit is None:
        return []
    if unit.cls is None and isinstance(unit.node, ast.ClassDef):
        return [unit] + [u for key, u in found.units.items() if key.startswith(f"{name}.")]
    return [unit]


def callees(modules: dict[str, Module], unit: Unit) -> list[Unit]:
    """The functions `unit` names: called, or passed on as values."""
    module = unit.module
    found: list[Unit] = []
    for node in ast.walk(unit.node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in module.units and node.id != unit.name:
                found += _lookup(modules, module.name, node.id)
            elif node.id in module.imported:
                target, inner = module.imported[node.id]
                if inner is not None:
                    found += _lookup(modules, target, inner)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = node.value.id
            if owner == "self" and unit.cls is not None:
                method = module.units.get(f"{unit.cls}.{node.attr}")
                found += [method] if method is not None else []
            elif owner in module.imported:
                target, inner = module.imported[owner]
                found += _lookup(modules, target if inner is None else f"{target}.{inner}", node.attr)
    return found


def direct_reads(unit: Unit) -> set[str]:
    """The unproven reads `unit` itself makes: `unproven store` and/or `cometbft`."""
    kinds = set()
    for node in ast.walk(unit.node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "abci_query":
            if any(k.arg == "prove" and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in node.keywords):
                continue
            kinds.add("unproven store")
        elif isinstance(node, ast.Attribute) and node.attr in UNPROVEN_STORE and not _is_called_proven(unit, node):
            kinds.add("unproven store")
        elif isinstance(node, ast.Attribute) and node.attr in COMETBFT and isinstance(node.value, (ast.Name,
                                                                                                  ast.Attribute)):
            if _client_like(node.value):
                kinds.add("cometbft")
    return kinds


def _is_called_proven(unit: Unit, attribute: ast.Attribute) -> bool:
    """An `abci_query` attribute inside a call with `prove=True` (the call is checked above)."""
    for node in ast.walk(unit.node):
        if isinstance(node, ast.Call) and node.func is attribute:
            return any(k.arg == "prove" and isinstance(k.value, ast.Constant) and k.value.value is True
                       for k in node.keywords)
    return False


def _client_like(node: ast.AST) -> bool:
    """`client`, `rpc`, `self.client`, `self.rpc`, `options.client()`... : what the RPC clients are called."""
    text = ast.unparse(node)
    return any(word in text for word in ("client", "rpc"))


def findings(modules: dict[str, Module], entries: set[str]) -> dict[str, set[str]]:
    """`entry function -> {reading function (kind)}`: every unproven read reached from each function of the entry
    modules, the walk stopping at other entry modules' functions."""
    result: dict[str, set[str]] = {}
    for module in modules.values():
        if module.path not in entries:
            continue
        for unit in module.units.values():
            reached = _reach(modules, unit, entries)
            reads = {f"{label(u)} ({kind})" for u in reached for kind in direct_reads(u)}
            if reads:
                result[label(unit)] = reads
    return result


def _reach(modules: dict[str, Module], start: Unit, entries: set[str]) -> list[Unit]:
    seen = {id(start)}
    order = [start]
    queue = [start]
    while queue:
        unit = queue.pop()
        for callee in callees(modules, unit):
            if id(callee) in seen or callee.module.path in entries:
                continue
            seen.add(id(callee))
            order.append(callee)
            queue.append(callee)
    return order
