"""Regenerate the committed protobuf modules: ``python -m trolly.abci_app.proto.regenerate`` (or ``make proto``).

protoc (shipped by the ``grpcio-tools`` dev dependency; the runtime needs only ``protobuf``) writes modules
that import their dependencies absolutely, as ``from tendermint.crypto import keys_pb2``. Those names only
resolve if ``abci_app/proto`` is on ``sys.path``, so this script rewrites them to the installed package path
(``from trolly.abci_app.proto.tendermint.crypto import keys_pb2``). Imports of ``google.protobuf`` stay as
they are. The same script regenerates ``chain/proto/*.proto`` (which have no cross-file imports).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
"""``abci_app/proto``: the include root of the CometBFT protos (files live under ``tendermint/...``)."""

REPO_ROOT = PROTO_ROOT.parent.parent
CHAIN_PROTO = REPO_ROOT / "chain" / "proto"
PACKAGE = "trolly.abci_app.proto"

_ABSOLUTE_IMPORT = re.compile(r"^from (tendermint(?:\.\w+)*) import (\w+_pb2)", re.MULTILINE)


def run_protoc(include: Path, sources: list[Path]) -> None:
    """Run the protoc bundled with grpc_tools, writing *_pb2.py next to each source."""
    from grpc_tools import protoc  # dev-only dependency, imported here so runtime code never needs it

    well_known = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto ship with grpc_tools
    args = ["protoc", f"-I{include}", f"-I{well_known}", f"--python_out={include}"]
    args += [str(source.relative_to(include)) for source in sources]
    status = subprocess.call([sys.executable, "-m", "grpc_tools.protoc", *args[1:]], cwd=include)
    if status != 0:
        raise SystemExit(f"protoc failed ({status}) for {include}")


def rewrite_imports(module: Path) -> bool:
    """Point ``from tendermint... import x_pb2`` at the installed package; True if the file changed."""
    text = module.read_text()
    new = _ABSOLUTE_IMPORT.sub(lambda m: f"from {PACKAGE}.{m.group(1)} import {m.group(2)}", text)
    if new != text:
        module.write_text(new)
        return True
    return False


def ensure_packages(root: Path) -> None:
    """Every folder holding generated modules must be a package for the ``trolly.`` mapping to find it."""
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__"]]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated protobuf modules (see trolly.abci_app.proto.regenerate)."""\n')


def main() -> None:
    tendermint_protos = sorted((PROTO_ROOT / "tendermint").rglob("*.proto"))
    run_protoc(PROTO_ROOT, tendermint_protos)
    ensure_packages(PROTO_ROOT / "tendermint")
    for module in sorted((PROTO_ROOT / "tendermint").rglob("*_pb2.py")):
        rewrite_imports(module)
    chain_protos = sorted(CHAIN_PROTO.glob("*.proto"))
    if chain_protos:
        run_protoc(CHAIN_PROTO, chain_protos)
    print(f"regenerated {len(tendermint_protos)} CometBFT and {len(chain_protos)} chain proto files")


if __name__ == "__main__":
    main()
