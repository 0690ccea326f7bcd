"""A running localnet: bring it up, wait until it makes blocks, watch it, kill and start nodes, take it down.

This is the Python API tests build on (the CLI is a thin layer over it):

    net = Localnet(home, LocalnetConfig(validators=4, workers=0, base_port=base))   # CometBFT by default
    net.up()                                   # 4 x (app, cometbft), then 4 verifiers; returns at height >= 1
    net.kill("validator-1")                    # SIGKILL its cometbft, app and verifier (children too)
    net.wait_for_height(net.height() + 3, nodes=[0, 2, 3])
    net.start("validator-1")                   # it catches up through CometBFT's block sync
    [(n.name, n.height, n.app_hash) for n in net.node_statuses()]
    net.app_hash_at(index, height)             # the app hash block `height` left, from node `index`
    name = net.add_node()                      # a full node from genesis (not in the validator set)
    net.down()

Start order: every node's app, then its engine; once the chain makes blocks, the verifiers (they only follow
the chain); then the workers. On first use the workers' homes are initialized meanwhile, all in parallel with
the nodes' start (each `trolly-worker init` is a process that imports torch). `down` stops them in reverse
order.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from trolly.abci_app.cometbft import CometbftBinary, CometbftError, find_cometbft
from trolly.abci_app.home import HomeError, ValidatorKey, check_home_chain_id, load_home, read_json
from trolly.wallet.errors import WalletError
from trolly.wallet.rpc import RpcClient

from .clients import (abandon_worker_init, begin_worker_init, console_service, finish_worker_init, verifier_services,
                      worker_services)
from .home_layout import (Layout, LocalnetConfig, LocalnetError, MAX_VALIDATORS, init_localnet, write_node_home,
                          write_test_keyring)
from .services import engine_service_name, node_service_names, node_services
from .supervisor import ServiceSpec, Supervisor

log = logging.getLogger("trolly.localnet")

START_TIMEOUT = 60.0
"""Seconds `up` waits for the first block before it gives up and stops what it started."""


@dataclass(frozen=True)
class NodeStatus:
    """One node as `status` shows it: height and app hash from its own RPC (None while it does not answer)."""

    name: str
    rpc: str
    height: int | None
    app_hash: str | None
    services: dict[str, bool]
    """Its services (app, engine, verifier) and whether each runs."""

    def to_json(self) -> dict:
        return asdict(self)


class Localnet:
    def __init__(self, home: Path, config: LocalnetConfig | None = None, cometbft: CometbftBinary | None = None) -> None:
        """`config` is used when the localnet is first written (later, its saved `localnet.json` wins);
        `cometbft` is the binary to run (default: `find_cometbft()` when a CometBFT localnet starts)."""
        self.layout = Layout(home)
        self.supervisor = Supervisor(self.layout.home)
        self._requested = config
        self._cometbft = cometbft
        self.warnings: list[str] = []
        """What the last `up`/`start` found worth telling the user (e.g. two running nodes sharing a key)."""

    @property
    def config(self) -> LocalnetConfig:
        return self.layout.load()

    def ensure_initialized(self) -> LocalnetConfig:
        if not self.layout.exists():
            init_localnet(self.layout, self._requested or LocalnetConfig())
            log.info("initialized a new localnet in %s", self.layout.home)
        config = self.layout.load()
        if self._requested is not None and self._requested != config:
            differing = [k for k in vars(config) if getattr(config, k) != getattr(self._requested, k)]
            log.warning("using the existing localnet's settings (differ in: %s); `reset` to change them",
                        ", ".join(differing))
        return config

    def cometbft_path(self, config: LocalnetConfig) -> str | None:
        """The cometbft binary a CometBFT localnet runs (found and version-checked once); None for solo."""
        if config.engine != "cometbft":
            return None
        if self._cometbft is None:
            try:
                self._cometbft = find_cometbft()
            except CometbftError as exc:
                raise LocalnetError(f"this localnet runs CometBFT: {exc}") from None
        return self._cometbft.path

    def running_services(self) -> list[str]:
        return [name for name in self.supervisor.records() if self.supervisor.is_running(name)]

    def up(self, timeout: float = START_TIMEOUT) -> LocalnetConfig:
        """Initialize on first use, start every service, return once the chain makes blocks and all started.

        On any failure everything started so far is stopped again (the files written stay, for inspection).
        """
        if self.running_services():
            raise LocalnetError(
                f"this localnet is already running ({', '.join(self.running_services())}); `down` it first"
            )
        # Ports and binary first: a localnet refused for a taken port or a missing cometbft is not written.
        planned = self.layout.load() if self.layout.exists() else self._requested or LocalnetConfig()
        check_ports_free(planned)
        cometbft = self.cometbft_path(planned)
        config = self.ensure_initialized()
        self.warnings = []
        for index in range(config.nodes):
            self.check_node_home(config, index)
        inits = begin_worker_init(self.layout, config)
        try:
            for spec in node_services(self.layout, config, cometbft):
                self.supervisor.start(spec)
                self.supervisor.wait_ready(spec, START_TIMEOUT)
            self.wait_for_blocks(config, timeout)
            for spec in verifier_services(self.layout, config):
                self.supervisor.start(spec)
            finish_worker_init(inits)
            for spec in worker_services(self.layout, config):
                self.supervisor.start(spec)
            console = console_service(self.layout, config)
            self.supervisor.start(console)
            self.supervisor.wait_ready(console, START_TIMEOUT)
        except BaseException:
            abandon_worker_init(inits)
            self.down()
            raise
        return config

    # ------------------------------------------------------------------------------------ one service

    def service_specs(self, config: LocalnetConfig) -> dict[str, ServiceSpec]:
        """Every service of this localnet by name, as `up` starts them."""
        cometbft = self.cometbft_path(config)
        specs = node_services(self.layout, config, cometbft) + verifier_services(self.layout, config)
        specs += worker_services(self.layout, config) + [console_service(self.layout, config)]
        return {spec.name: spec for spec in specs}

    def resolve(self, config: LocalnetConfig, name: str) -> list[str]:
        """The services `name` stands for: itself, or every service of the node called `name`."""
        for index in range(config.nodes):
            if name == config.node_name(index):
                return node_service_names(config, index)
        known = [service for index in range(config.nodes) for service in node_service_names(config, index)]
        known += [f"worker-{i}" for i in range(config.workers)] + ["console"]
        if name in known:
            return [name]
        nodes = ", ".join(config.node_name(i) for i in range(config.nodes))
        raise LocalnetError(f"no service or node {name!r} in this localnet; nodes: {nodes}; services: {', '.join(known)}")

    def restart(self, name: str) -> None:
        """Stop one service if it still runs, and start it again with the same command (its log is appended)."""
        config = self.config
        specs = self.service_specs(config)
        if name not in specs:
            raise LocalnetError(f"no service {name!r} in this localnet; services: {', '.join(specs)}")
        self.supervisor.stop(name)
        self.supervisor.start(specs[name])
        self.supervisor.wait_ready(specs[name], START_TIMEOUT)

    def kill(self, name: str) -> list[str]:
        """SIGKILL a service, or every service of a node (`validator-<i>`), children too, as a crash would.
        Returns the services that were running and are now dead."""
        config = self.config
        killed = []
        for service in reversed(self.resolve(config, name)):  # verifier, engine, app: clients first
            if self.supervisor.kill(service):
                killed.append(service)
        return killed

    def start(self, name: str) -> list[str]:
        """Start a stopped service, or every stopped service of a node (`validator-<i>`: app, engine, verifier,
        in that order). Refuses a node whose home is of another chain or whose ports are taken; warns (in
        `self.warnings`, and the log) when its consensus key is held by another running node.
        Returns the services started."""
        config = self.config
        services = self.resolve(config, name)
        stopped = [service for service in services if not self.supervisor.is_running(service)]
        if not stopped:
            raise LocalnetError(f"{name} is already running ({', '.join(services)})")
        self.warnings = []
        specs = self.service_specs(config)
        index = _node_index(config, stopped)
        if index is not None:
            self.check_node_home(config, index)
            check_node_ports_free(config, index, [s for s in stopped if not s.startswith("verifier-")])
        for service in stopped:
            self.supervisor.start(specs[service])
            self.supervisor.wait_ready(specs[service], START_TIMEOUT)
        return stopped

    # ----------------------------------------------------------------------------------- node checks

    def check_node_home(self, config: LocalnetConfig, index: int) -> None:
        """Refuse a node home of another chain; warn if another running node holds the same consensus key."""
        try:
            home = check_home_chain_id(self.layout.node_home(index), config.chain_id)
        except HomeError as exc:
            raise LocalnetError(f"{config.node_name(index)}: {exc}") from None
        for other in range(config.nodes):
            if other == index or not self.supervisor.is_running(engine_service_name(config, other)):
                continue
            try:
                other_key = load_home(self.layout.node_home(other)).validator_key
            except HomeError:
                continue
            if other_key.pubkey == home.validator_key.pubkey:
                warning = (f"{config.node_name(index)} holds the same consensus key as {config.node_name(other)}, "
                           f"which is running: both will sign, and that validator will be slashed and jailed "
                           f"for double-signing")
                log.warning(warning)
                self.warnings.append(warning)

    # ---------------------------------------------------------------------------------------- chain

    def node_statuses(self, timeout: float = 2.0) -> list[NodeStatus]:
        """Every node's name, RPC URL, latest height and app hash (None if it does not answer), services."""
        config = self.config
        statuses = []
        for index in range(config.nodes):
            height = app_hash = None
            try:
                with RpcClient(config.rpc_url(index), timeout=timeout) as client:
                    status = client.status()
                    height, app_hash = status.latest_block_height, status.latest_app_hash
            except (WalletError, OSError):
                pass
            services = {name: self.supervisor.is_running(name) for name in node_service_names(config, index)}
            statuses.append(NodeStatus(config.node_name(index), config.rpc_url(index), height, app_hash, services))
        return statuses

    def height(self, index: int = 0) -> int:
        """Node `index`'s latest height (raises if it does not answer)."""
        with RpcClient(self.config.rpc_url(index), timeout=5.0) as client:
            return client.status().latest_block_height

    def app_hash_at(self, index: int, height: int) -> str:
        """The app hash (upper-case hex) that block `height` left, as node `index` recorded it: the `app_hash`
        in block height + 1's header (CometBFT puts the result of block H in block H+1)."""
        with RpcClient(self.config.rpc_url(index), timeout=5.0) as client:
            return client.block(height + 1).app_hash.hex().upper()

    def wait_for_height(self, height: int, nodes: list[int] | None = None, timeout: float = 60.0) -> None:
        """Wait until every node in `nodes` (default: all) has made block `height`."""
        config = self.config
        waiting = list(range(config.nodes)) if nodes is None else list(nodes)
        deadline = time.monotonic() + timeout
        while waiting:
            try:
                if self.height(waiting[0]) >= height:
                    waiting.pop(0)
                    continue
            except (WalletError, OSError):
                pass
            if time.monotonic() > deadline:
                names = ", ".join(config.node_name(i) for i in waiting)
                raise LocalnetError(f"{names} did not reach height {height} within {timeout:.0f}s")
            time.sleep(0.2)

    def wait_for_blocks(self, config: LocalnetConfig, timeout: float, min_height: int = 1) -> int:
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        with RpcClient(config.rpc_url(0), timeout=2.0) as client:
            while time.monotonic() < deadline:
                dead = self.supervisor.exited()
                if dead:
                    name, code = next(iter(dead.items()))
                    raise LocalnetError(
                        f"{name} exited with code {code} during start-up; see {self.supervisor.log_file(name)}"
                    )
                try:
                    height = client.status().latest_block_height
                    if height >= min_height:
                        return height
                except (WalletError, OSError) as exc:  # node not up yet
                    last_error = str(exc)
                time.sleep(0.2)
        raise LocalnetError(f"the node did not produce a block within {timeout:.0f}s ({last_error})")

    # ------------------------------------------------------------------------------------ add a node

    def add_node(self, key_from: str | None = None) -> str:
        """Write the home of one more CometBFT node (not started: `start(name)` does) and return its name.

        It has the localnet's genesis, a fresh node key, every other node as a persistent peer, and a fresh
        consensus key, so it starts as a full node that catches up by block sync (and may then stake to become
        a validator with its operator key `validator-<i>`, added to the test keyring); or, with `key_from` (a
        node name), a copy of that node's consensus key: the way to make a validator double-sign.
        """
        config = self.config
        if config.engine != "cometbft":
            raise LocalnetError("only a CometBFT localnet can add nodes (the solo engine runs one validator)")
        index = config.nodes
        if index >= MAX_VALIDATORS:
            raise LocalnetError(f"a localnet has at most {MAX_VALIDATORS} nodes")
        if key_from is None:
            validator_key = ValidatorKey.generate()
        else:
            source = self.resolve(config, key_from)
            if not source[0].startswith("app-") or len(source) < 2:
                raise LocalnetError(f"--key-from takes a node name (validator-<i>), not {key_from!r}")
            validator_key = load_home(self.layout.node_home(int(source[0].split("-")[1]))).validator_key
        genesis = read_json(self.layout.node_home(0) / "config" / "genesis.json")
        peers = [f"{load_home(self.layout.node_home(i)).node_key.node_id}@127.0.0.1:{config.p2p_port(i)}"
                 for i in range(config.nodes)]
        grown = replace(config, full_nodes=config.full_nodes + 1)
        write_node_home(self.layout, grown, index, genesis, validator_key, ValidatorKey.generate(), peers)
        self.layout.save(grown)
        write_test_keyring(self.layout, grown)
        return grown.node_name(index)

    def down(self) -> list[str]:
        names = list(self.supervisor.records())
        self.supervisor.stop_all()
        return names

    def reset(self) -> None:
        self.down()
        self.layout.remove()


def _node_index(config: LocalnetConfig, services: list[str]) -> int | None:
    """The node whose app or engine is among `services` (None if only a verifier or worker starts)."""
    for service in services:
        kind, _, number = service.rpartition("-")
        if kind in ("app", "cometbft", "engine"):
            return int(number)
    return None


def _taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to listen on
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def check_ports_free(config: LocalnetConfig) -> None:
    """Fail before starting anything if a port of this localnet is taken (a `trolly-node dev`, another localnet)."""
    roles = config.port_roles()
    taken = [port for port in roles if _taken(port)]
    if taken:
        named = ", ".join(f"{port} ({roles[port]})" for port in taken)
        raise LocalnetError(
            f"port(s) {named} on 127.0.0.1 in use (another localnet, or `trolly-node dev`?); "
            f"stop that, or choose other ports with --base-port (this localnet uses {config.base_port}.."
            f"{max(config.ports())}; the base port is saved in localnet.json: `reset` to change it)"
        )


def check_node_ports_free(config: LocalnetConfig, index: int, services: list[str]) -> None:
    """Before starting a node's app or engine: the ports those will listen on must be free."""
    ports = []
    if any(s.startswith("app-") for s in services):
        # Checked for either engine, whether the app takes its home's unix socket or falls back to this port
        # (`Layout.app_address`): it is this node's port in the localnet's plan either way, as `up`'s check of
        # every planned port has it, and one rule is simpler than asking which address the app takes. The cost
        # is a refusal when another program holds exactly this port while the app would not have used it.
        ports.append(config.abci_port(index))
    if any(s.startswith(("cometbft-", "engine-")) for s in services):
        ports.append(config.rpc_port(index))
        if config.engine == "cometbft":
            ports.append(config.p2p_port(index))
    roles = config.port_roles()
    taken = [port for port in ports if _taken(port)]
    if taken:
        named = ", ".join(f"{port} ({roles[port]})" for port in taken)
        raise LocalnetError(f"cannot start {config.node_name(index)}: port(s) {named} on 127.0.0.1 already in use")

