"""The processes of a localnet, as `ServiceSpec`s, in start order: node(s), then verifiers, then workers."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from .layout import Layout, LocalnetConfig, LocalnetError
from .supervisor import ServiceSpec


def console_script(name: str) -> str:
    """Path of one of the project's console scripts, next to the running interpreter first."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise LocalnetError(f"cannot find the `{name}` command: is the trolly package installed in this environment?")
    return found


def node_services(layout: Layout, config: LocalnetConfig) -> list[ServiceSpec]:
    node = console_script("trolly-node")
    specs: list[ServiceSpec] = []
    if config.engine == "solo":
        socket = f"unix://{layout.app_socket(0)}"
        home = str(layout.node_home(0))
        specs.append(ServiceSpec("app-0", (node, "start", "--home", home, "--abci", socket)))
        specs.append(
            ServiceSpec(
                "engine-0",
                (node, "engine", "--home", home, "--proxy-app", socket,
                 "--rpc-laddr", f"tcp://127.0.0.1:{config.rpc_port(0)}", "--block-time", config.block_time),
            )
        )
        return specs
    cometbft = shutil.which("cometbft")
    if cometbft is None:
        raise LocalnetError(
            f"--engine cometbft needs a `cometbft` v0.38 binary on PATH, and none was found. The {config.validators} "
            f"node homes are ready in {layout.home / 'nodes'}. Install CometBFT from "
            "https://github.com/cometbft/cometbft/releases (a v0.38.x archive; put `cometbft` on PATH) or build it "
            "with Go >= 1.22: `go install github.com/cometbft/cometbft/cmd/cometbft@v0.38.17`; then run `up` "
            "again. Or use the default solo engine (`--engine solo`, one validator)."
        )
    # Every app first, each listening before its CometBFT starts: CometBFT connects to its app once at start-up.
    for i in range(config.validators):
        home = str(layout.node_home(i))
        specs.append(ServiceSpec(f"app-{i}", (node, "start", "--home", home, "--abci",
                                              f"tcp://127.0.0.1:{config.abci_port(i)}"), ready_port=config.abci_port(i)))
    for i in range(config.validators):
        specs.append(ServiceSpec(f"cometbft-{i}", (cometbft, "node", "--home", str(layout.node_home(i)))))
    return specs
