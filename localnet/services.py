"""The processes of a localnet, as `ServiceSpec`s: per node its app and its consensus engine (a `cometbft`
process, or the solo engine for the one-validator localnet), per genesis validator its verifier.

Service names: `app-<i>`, `cometbft-<i>` (or `engine-0`), `verifier-<i>`, `worker-<i>`. A node's name,
`validator-<i>`, stands for all of its services at once (`node_service_names`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from trolly.abci_app.server import MAX_UNIX_PATH_BYTES

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


def engine_service_name(config: LocalnetConfig, index: int) -> str:
    return "engine-0" if config.engine == "solo" else f"cometbft-{index}"


def node_service_names(config: LocalnetConfig, index: int) -> list[str]:
    """A node's services in start order: its app, its engine, and its verifier (genesis validators only)."""
    names = [f"app-{index}", engine_service_name(config, index)]
    if index < config.validators:
        names.append(f"verifier-{index}")
    return names


def app_hash_seed(index: int) -> str:
    """Node `index`'s app runs with PYTHONHASHSEED = index + 1: each node of a localnet hashes strings and bytes
    differently, so a state transition that depended on set or dict iteration order would make the nodes
    disagree on the app hash at once (and reproducibly), instead of by chance."""
    return str(index + 1)


def solo_app_address(layout: Layout, config: LocalnetConfig, index: int) -> str:
    """Where a solo localnet's app listens: its home's 0600 unix socket, or loopback TCP on its ABCI port when the
    home is too deep for a socket path (Linux takes at most MAX_UNIX_PATH_BYTES)."""
    socket_path = layout.app_socket(index)
    # The server binds in a private directory beside it first (`.abci-XXXXXXXX/s`), which must fit too.
    staging = socket_path.parent / ".abci-XXXXXXXX" / "s"
    if len(str(staging).encode()) <= MAX_UNIX_PATH_BYTES:
        return f"unix://{socket_path}"
    return f"tcp://127.0.0.1:{config.abci_port(index)}"


def app_service(layout: Layout, config: LocalnetConfig, index: int) -> ServiceSpec:
    node = console_script("trolly-node")
    home = str(layout.node_home(index))
    env = {"PYTHONHASHSEED": app_hash_seed(index)}
    if config.engine == "solo":
        return ServiceSpec(f"app-{index}", (node, "start", "--home", home, "--abci", solo_app_address(layout, config, index)),
                           env=env)
    # Listening before its CometBFT starts (`ready_port`): CometBFT connects to its app once at start-up.
    return ServiceSpec(f"app-{index}", (node, "start", "--home", home, "--abci",
                                        f"tcp://127.0.0.1:{config.abci_port(index)}"), env=env,
                       ready_port=config.abci_port(index))


def engine_service(layout: Layout, config: LocalnetConfig, index: int, cometbft: str | None) -> ServiceSpec:
    """Node `index`'s consensus engine; `cometbft` is the binary's path (from `find_cometbft`) for that engine."""
    home = str(layout.node_home(index))
    if config.engine == "solo":
        node = console_script("trolly-node")
        return ServiceSpec("engine-0", (node, "engine", "--home", home, "--proxy-app", solo_app_address(layout, config, 0),
                                        "--rpc-laddr", f"tcp://127.0.0.1:{config.rpc_port(0)}",
                                        "--block-time", config.block_time))
    if cometbft is None:
        raise LocalnetError("internal: a CometBFT localnet's engine needs the cometbft binary's path")
    return ServiceSpec(f"cometbft-{index}", (cometbft, "node", "--home", home))


def node_services(layout: Layout, config: LocalnetConfig, cometbft: str | None = None) -> list[ServiceSpec]:
    """Every node's app and engine, in start order: all the apps, then all the engines."""
    apps = [app_service(layout, config, i) for i in range(config.nodes)]
    return apps + [engine_service(layout, config, i, cometbft) for i in range(config.nodes)]
