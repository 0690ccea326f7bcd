"""The networks `benchmarks.network_throughput` drives, each started fresh and always stopped.

- `trolly`: 4 CometBFT v0.38 validators, each a `cometbft node` and its `trolly-node start` app on a unix
  socket (CometBFT's advice for an app on the same host, and `trolly-node start`'s default), homes
  written with `trolly.abci_app.home.write_home` (the localnet's own writer) from one genesis that funds the
  benchmark's accounts and bonds the validators with unequal stakes, 40/30/20/10 % of the power, as the
  localnet does;
- `kvstore`: the same 4 CometBFT validators (same config.toml, same consensus params), each running
  CometBFT's built-in `kvstore` app (`proxy_app = "kvstore"`): the anchor, the same consensus with an app that
  does almost nothing;
- `noop`: the `trolly` network with `benchmarks._noop_app` in place of the Trolly app: Trolly's ABCI server in
  a process of its own, over the same socket, with an app that runs nothing (the floor of any app served so);
- `sigcheck`: the `noop` network whose app decodes each new transaction and checks its signature, the one
  piece of work every validator must do per transaction;
- `solo`: `trolly-node start` driven by the solo engine (`trolly-node engine`), as in `trolly-node dev`.

Every process starts in its own session and is stopped (SIGTERM, then SIGKILL of the whole session) by
`Network.stop`, which the benchmark calls in a `finally`; ports are taken free from the kernel; homes live in
a temporary directory the caller removes. The apps' sockets live in a short directory of their own (a unix
socket's path is limited to 107 bytes, and a home may be deeper), which `Network.stop` removes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from trolly.abci_app import home as homelib
from trolly.abci_app.listen_address import parse_address, unix_socket_fits

VALIDATORS = 4
STAKE_UNIT = 10_000_000
"""The smallest validator's stake (10 TRL, power 10); validator i of 4 bonds (4 - i) times it."""


@dataclass(frozen=True)
class CometbftSettings:
    """config.toml values set the same way for the Trolly and kvstore networks (and the solo engine's block
    interval), so that both run the same consensus."""

    timeout_commit: str
    mempool_size: int
    recheck: bool
    signature_checker: bool = True
    """The Trolly apps' signature checker process (config.toml `[trolly] signature_checker`)."""
    peer_gossip_sleep: str = "100ms"
    """`[consensus] peer_gossip_sleep_duration`: how long a peer's gossip routine sleeps when it has nothing
    to send (CometBFT's default 100ms; a vote or block part waits up to that long to go out)."""

    def extra(self) -> dict:
        return {
            "mempool": {"size": self.mempool_size, "recheck": self.recheck, "cache_size": 4 * self.mempool_size},
            "consensus": {"peer_gossip_sleep_duration": self.peer_gossip_sleep},
            "tx_index": {"indexer": "null"},
            "trolly": {"signature_checker": self.signature_checker},
        }


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel had free just now (all held open together while they are chosen)."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            probes.append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def wait_for_listener(address: str, process: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    """Until something accepts connections at `address` (`unix://PATH` or `tcp://127.0.0.1:PORT`)."""
    listen = parse_address(address)
    unix = listen.scheme == "unix"
    target = listen.path if unix else (listen.host, listen.port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} while starting")
        with socket.socket(socket.AF_UNIX if unix else socket.AF_INET) as probe:
            if probe.connect_ex(target) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {address} within {timeout:.0f}s")


def _socket_directory() -> Path:
    """A fresh directory for the apps' sockets: in the temporary directory if its paths fit a socket, else in
    /tmp."""
    directory = Path(tempfile.mkdtemp(prefix="tnb-"))
    if unix_socket_fits(directory / "app00.sock"):
        return directory
    directory.rmdir()
    return Path(tempfile.mkdtemp(prefix="tnb-", dir="/tmp"))


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """`pid`'s running children, grandchildren... (an app's signature checker process)."""
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as children:
                kids = [int(child) for child in children.read().split()]
        except FileNotFoundError:
            kids = []
        found.extend(kids)
        pending.extend(kids)
    return found


@dataclass
class Network:
    """A running network: its RPC endpoints, its processes by role, and where their logs go."""

    name: str
    rpc_ports: list[int]
    directory: Path
    processes: dict[str, list[subprocess.Popen]] = field(default_factory=dict)
    logs: list = field(default_factory=list)
    sockets: Path = field(default_factory=lambda: _socket_directory())
    """Where the apps' unix sockets are: a short path, whatever the depth of `directory`."""

    def app_address(self, index: int) -> str:
        return f"unix://{self.sockets / f'app{index}.sock'}"

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.rpc_ports]

    def rpc_url(self, index: int = 0) -> str:
        return f"http://127.0.0.1:{self.rpc_ports[index]}"

    def spawn(self, role: str, argv: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.directory / f"{log_name}.log", "ab")
        self.logs.append(log)
        process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.setdefault(role, []).append(process)
        return process

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each role's processes and their descendants."""
        return {role: sum(process_cpu_seconds(pid) for process in processes
                          for pid in [process.pid, *descendants(process.pid)])
                for role, processes in self.processes.items()}

    def check_alive(self) -> None:
        for role, processes in self.processes.items():
            for process in processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{self.name}: a {role} process exited with code {process.returncode}; "
                                       f"logs in {self.directory}")

    def stop(self) -> None:
        everyone = [process for processes in reversed(list(self.processes.values())) for process in processes]
        for process in everyone:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for process in everyone:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the session: children (signature checker) too
            except (ProcessLookupError, PermissionError):
                pass
            process.wait()
        for log in self.logs:
            log.close()
        shutil.rmtree(self.sockets, ignore_errors=True)


def _node_config(index: int, ports: list[int], node_ids: list[str], proxy_app: str,
                 settings: CometbftSettings) -> homelib.NodeConfig:
    p2p = [ports[2 * i] for i in range(VALIDATORS)]
    peers = ",".join(f"{node_ids[j]}@127.0.0.1:{p2p[j]}" for j in range(VALIDATORS) if j != index)
    return homelib.NodeConfig(
        moniker=f"validator-{index}",
        proxy_app=proxy_app,
        p2p_laddr=f"tcp://127.0.0.1:{p2p[index]}",
        rpc_laddr=f"tcp://127.0.0.1:{ports[2 * index + 1]}",
        persistent_peers=peers,
        addr_book_strict=False,
        allow_duplicate_ip=True,
        timeout_commit=settings.timeout_commit,
        prometheus_listen_addr="",
        extra=settings.extra(),
    )


def _validator_set(keys: list[homelib.ValidatorKey]) -> list[homelib.GenesisValidator]:
    return [homelib.GenesisValidator(key.pubkey, homelib.encode_address(key.address), (VALIDATORS - i) * STAKE_UNIT,
                                     f"validator-{i}") for i, key in enumerate(keys)]


APPS = ("trolly", "kvstore", "noop", "sigcheck")
"""What a CometBFT network's validators run: `trolly-node start`, CometBFT's own kvstore, or the noop app
(checking signatures, for `sigcheck`)."""


def _app_argv(app: str, root: Path, address: str) -> list[str]:
    if app in ("noop", "sigcheck"):
        flags = ["--signatures"] if app == "sigcheck" else []
        return [sys.executable, str(Path(__file__).with_name("_noop_app.py")), "--abci", address, *flags]
    return [sys.executable, "-m", "trolly.abci_app.cli", "--log-level", "warning", "start", "--home", str(root),
            "--abci", address]


def start_cometbft_network(name: str, cometbft: str, directory: Path, chain_id: str, accounts: dict[str, int],
                           settings: CometbftSettings, app: str) -> Network:
    """4 validators on CometBFT running `app` (one of `APPS`); the Trolly apps' genesis funds `accounts`."""
    if app not in APPS:
        raise ValueError(f"app must be one of {APPS}, not {app!r}")
    directory.mkdir(parents=True)
    ports = free_ports(2 * VALIDATORS)  # per node: p2p, rpc (the app listens on a unix socket)
    validator_keys = [homelib.ValidatorKey.generate() for _ in range(VALIDATORS)]
    node_keys = [homelib.ValidatorKey.generate() for _ in range(VALIDATORS)]
    validators = _validator_set(validator_keys)
    funded = dict(accounts)
    funded.update({validator.operator: validator.stake for validator in validators})
    app_state = homelib.build_app_state(funded, validators) if app == "trolly" else {}
    genesis = homelib.build_genesis(chain_id, app_state, validators)
    network = Network(name, [ports[2 * i + 1] for i in range(VALIDATORS)], directory)
    try:
        for index in range(VALIDATORS):
            address = network.app_address(index)
            config = _node_config(index, ports, [key.node_id for key in node_keys],
                                  "kvstore" if app == "kvstore" else address, settings)
            root = directory / f"node{index}"
            homelib.write_home(root, genesis, validator_keys[index], node_keys[index], config)
            if app != "kvstore":
                process = network.spawn("app", _app_argv(app, root, address), f"app{index}")
                wait_for_listener(address, process, f"{name} app {index}")
            network.spawn("cometbft", [cometbft, "node", "--home", str(root)], f"cometbft{index}")
        return network
    except BaseException:
        network.stop()
        raise


def start_solo(directory: Path, chain_id: str, accounts: dict[str, int], settings: CometbftSettings) -> Network:
    """One Trolly validator under the solo engine (`trolly-node start` + `trolly-node engine`)."""
    directory.mkdir(parents=True)
    [rpc_port] = free_ports(1)
    key = homelib.ValidatorKey.generate()
    validators = _validator_set([key])
    funded = dict(accounts)
    funded[validators[0].operator] = validators[0].stake
    genesis = homelib.build_genesis(chain_id, homelib.build_app_state(funded, validators), validators)
    root = directory / "node"
    rpc = f"tcp://127.0.0.1:{rpc_port}"
    homelib.write_home(root, genesis, key, config=homelib.NodeConfig(rpc_laddr=rpc, extra=settings.extra()))
    network = Network("solo", [rpc_port], directory)
    address = network.app_address(0)
    try:
        node = [sys.executable, "-m", "trolly.abci_app.cli", "--log-level", "warning"]
        app = network.spawn("app", [*node, "start", "--home", str(root), "--abci", address], "app")
        wait_for_listener(address, app, "solo app")
        network.spawn("engine", [*node, "engine", "--home", str(root), "--proxy-app", address, "--rpc-laddr",
                                 rpc, "--block-time", settings.timeout_commit], "engine")
        return network
    except BaseException:
        network.stop()
        raise
