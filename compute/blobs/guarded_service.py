"""An aiohttp application served behind a connection guard, with a start/stop lifecycle.

The worker's blob service (`server.py`) and the relay (`relay.py`) are both served this way, so that how a
connection is accepted, capped and closed is written once: the application runs in an aiohttp `AppRunner`,
but without an aiohttp site, so that every accepted connection passes a `ConnectionGuard` (connections.py)
before aiohttp sees it; aiohttp's keep-alive timer is the header timeout. `stop` closes the listening socket
first (no new connections), then the runner (which closes the connections it serves).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from .connections import ConnectionGuard, ConnectionLimits, admitted_total


class GuardedService:
    """Serves the application `build_app` makes on host:port within `limits` (port 0 picks a free port, and
    `port` holds the chosen one after `start`). A subclass names its application and may add to the lifecycle
    (a `run`, checks before `start`, what `stop` must also close)."""

    def __init__(self, host: str, port: int, limits: ConnectionLimits) -> None:
        self.host = host
        self.port = port
        self.limits = limits
        self.guard: ConnectionGuard | None = None
        """The connection counts, from `start` on (the total cap is fixed then, from the file limit)."""
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None

    def build_app(self) -> web.Application:
        """The aiohttp application to serve, built at each `start`."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """The base URL it listens on; an IPv6 host in brackets."""
        return f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}"

    async def start(self) -> None:
        # keepalive_timeout is aiohttp's timer on a connection waiting for a complete request, from its start
        # and after each response: the header timeout.
        self._runner = web.AppRunner(self.build_app(), access_log=None, keepalive_timeout=self.limits.header_timeout)
        await self._runner.setup()
        self.guard = ConnectionGuard(self.limits, admitted_total(self.limits))
        self._server = await asyncio.get_running_loop().create_server(
            self.guard.protocol_factory(self._runner.server), self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # no new connections
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()  # closes the connections it serves
            self._runner = None

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()
