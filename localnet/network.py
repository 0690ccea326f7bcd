"""A running localnet: bring it up, wait until it makes blocks, watch it, take it down."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from trolly.wallet.errors import WalletError
from trolly.wallet.rpc import RpcClient

from .layout import Layout, LocalnetConfig, LocalnetError, init_localnet
from .services import node_services
from .supervisor import ServiceSpec, Supervisor

log = logging.getLogger("trolly.localnet")


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

    def up(self, timeout: float = 60.0) -> LocalnetConfig:
        config = self.ensure_initialized()
        if self.running_services():
            raise LocalnetError(
                f"this localnet is already running ({', '.join(self.running_services())}); `down` it first"
            )
        try:
            for spec in node_services(self.layout, config):
                self.supervisor.start(spec)
            self.wait_for_blocks(config, timeout)
            for spec in self.client_services(config):
                self.supervisor.start(spec)
        except BaseException:
            self.down()
            raise
        return config

    def client_services(self, config: LocalnetConfig) -> list[ServiceSpec]:
        """Verifiers and workers: added by `trolly.localnet.clients` once those services exist."""
        from .clients import client_services

        return client_services(self.layout, config)

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
