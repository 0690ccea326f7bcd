"""The processes of a localnet, as `ServiceSpec`s: per node its app and its consensus engine (a `cometbft`
process, or the solo engine for the one-validator localnet), per genesis validator its verifier.

Service names: `app-<i>`, `cometbft-<i>` (or `engine-0`), `verifier-<i>`, `worker-<i>`. A node's name,
`validator-<i>`, stands for all of its services at once (`node_service_names`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from .home_layout import Layout, LocalnetConfig, LocalnetError
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


def app_service(layout: Layout, config: LocalnetConfig, index: int) -> ServiceSpec:
    """Node `index`'s app, listening where its engine dials it (`Layout.app_address`, as its config.toml's
    `proxy_app` says). CometBFT connects to its app once, at start-up: its app must be listening before it starts
    (`ready_address`). The solo engine dials again until its app answers, so it need not wait."""
    node = console_script("trolly-node")
    address = layout.app_address(config, index)
    argv = (node, "start", "--home", str(layout.node_home(index)), "--abci", address,
            "--metrics-laddr", f"127.0.0.1:{config.app_metrics_port(index)}")
    ready = address if config.engine == "cometbft" else ""
    return ServiceSpec(f"app-{index}", argv, env={"PYTHONHASHSEED": app_hash_seed(index)}, ready_address=ready)


def engine_service(layout: Layout, config: LocalnetConfig, index: int, cometbft: str | None) -> ServiceSpec:
    """Node `index`'s consensus engine; `cometbft` is the binary's path (from `find_cometbft`) for that engine."""
    home = str(layout.node_home(index))
    if config.engine == "solo":
        node = console_script("trolly-node")
        return ServiceSpec("engine-0", (node, "engine", "--home", home, "--proxy-app", layout.app_address(config, 0),
                                        "--rpc-laddr", f"tcp://127.0.0.1:{config.rpc_port(0)}",
                                        "--block-time", config.block_time,
                                        "--prometheus-laddr", f"127.0.0.1:{config.prometheus_port(0)}"))
    if cometbft is None:
        raise LocalnetError("internal: a CometBFT localnet's engine needs the cometbft binary's path")
    # The app's address on the command line too (it overrides config.toml's `proxy_app`, which says the same), so
    # a home whose config.toml names another address (written by an older version that put every app on TCP, or
    # a localnet directory moved since) still dials its app where `app_service` makes it listen.
    return ServiceSpec(f"cometbft-{index}", (cometbft, "node", "--home", home,
                                             "--proxy_app", layout.app_address(config, index)))


def node_services(layout: Layout, config: LocalnetConfig, cometbft: str | None = None) -> list[ServiceSpec]:
    """Every node's app and engine, in start order: all the apps, then all the engines."""
    apps = [app_service(layout, config, i) for i in range(config.nodes)]
    return apps + [engine_service(layout, config, i, cometbft) for i in range(config.nodes)]
