"""A running localnet: bring it up, wait until it makes blocks, watch it, restart a service, take it down.

Start order: the node processes; once the chain makes blocks, the verifiers (they only follow the chain);
then the workers. On first use the workers' homes are initialized meanwhile, all in parallel with the node's
start (each `trolly-worker init` is a process that imports torch). `down` stops them in reverse order.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

from trolly.wallet.errors import WalletError
from trolly.wallet.rpc import RpcClient

from .clients import abandon_worker_init, begin_worker_init, finish_worker_init, verifier_services, worker_services
from .layout import Layout, LocalnetConfig, LocalnetError, init_localnet
from .services import node_services
from .supervisor import ServiceSpec, Supervisor

log = logging.getLogger("trolly.localnet")

START_TIMEOUT = 60.0
"""Seconds `up` waits for the first block before it gives up and stops what it started."""


class Localnet:
    def __init__(self, home: Path, config: LocalnetConfig | None = None) -> None:
        self.layout = Layout(home)
        self.supervisor = Supervisor(self.layout.home)
        self._requested = config

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
        # Ports first: a fresh localnet refused for a taken port is not written, so `--base-port` can change.
        check_ports_free(self.layout.load() if self.layout.exists() else self._requested or LocalnetConfig())
        config = self.ensure_initialized()
        inits = begin_worker_init(self.layout, config)
        try:
            for spec in node_services(self.layout, config):
                self.supervisor.start(spec)
                self.supervisor.wait_ready(spec, START_TIMEOUT)
            self.wait_for_blocks(config, timeout)
            for spec in verifier_services(self.layout, config):
                self.supervisor.start(spec)
            finish_worker_init(inits)
            for spec in worker_services(self.layout, config):
                self.supervisor.start(spec)
        except BaseException:
            abandon_worker_init(inits)
            self.down()
            raise
        return config

    def service_specs(self, config: LocalnetConfig) -> dict[str, ServiceSpec]:
        """Every service of this localnet by name, as `up` starts them."""
        specs = node_services(self.layout, config) + verifier_services(self.layout, config)
        specs += worker_services(self.layout, config)
        return {spec.name: spec for spec in specs}

    def restart(self, name: str) -> None:
        """Stop one service if it still runs, and start it again with the same command (its log is appended)."""
        specs = self.service_specs(self.config)
        if name not in specs:
            raise LocalnetError(f"no service {name!r} in this localnet; services: {', '.join(specs)}")
        self.supervisor.stop(name)
        self.supervisor.start(specs[name])
        self.supervisor.wait_ready(specs[name], START_TIMEOUT)

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

    def down(self) -> list[str]:
        names = list(self.supervisor.records())
        self.supervisor.stop_all()
        return names

    def reset(self) -> None:
        self.down()
        self.layout.remove()


def check_ports_free(config: LocalnetConfig) -> None:
    """Fail before starting anything if a port of this localnet is taken (a `trolly-node dev`, another localnet)."""
    taken = []
    for port in config.ports():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to listen on
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    if taken:
        raise LocalnetError(
            f"port(s) {', '.join(map(str, taken))} on 127.0.0.1 are in use (another localnet, or `trolly-node dev`?); "
            f"stop that, or choose other ports with --base-port (this localnet uses {config.base_port}.."
            f"{max(config.ports())}; the base port is saved in localnet.json: `reset` to change it)"
        )
