"""A process's Prometheus endpoint: its own registry served at `http://HOST:PORT/metrics` from a thread.

The node, the solo engine, the worker and the verifier each serve their own metrics (docs/operations.md,
"Metrics"); this is the one way they listen. A leaf module with nothing of the project imported, like
`files.py` beside it, so that the node (`abci_app`, which may import only `chain` and these leaves) shares it
with the worker and the verifier.

Addresses: `HOST:PORT` (`127.0.0.1:26661`, `[::1]:26661`, `:26661` for every interface, as CometBFT writes
its own), or `tcp://` before one; `""` or `"0"` turns the endpoint off; port 0 takes any free port (tests).

A port already in use is bad input an operator can meet any day (another node, a second worker on the same
machine). What happens then is the operator's choice (`PORT_IN_USE_CHOICES`): `continue` logs which address
is taken and the process goes on without metrics; `refuse` stops it with `MetricsPortInUse`, saying which.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger("trolly.metrics")

CONTINUE = "continue"
"""A taken port: say which, and go on without the endpoint."""
REFUSE = "refuse"
"""A taken port: refuse to start, saying which."""
PORT_IN_USE_CHOICES = (CONTINUE, REFUSE)
OFF = ("", "0")
"""Addresses that turn an endpoint off."""


class MetricsEndpointError(Exception):
    """A metrics address that cannot be served; the message says which and why."""


class MetricsPortInUse(MetricsEndpointError):
    """The metrics address is taken by another process, and the configuration asks to refuse."""


@dataclass(frozen=True)
class MetricsAddress:
    """Where an endpoint listens: a host (empty: every interface) and a port (0: any free one)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_metrics_address(text: str) -> MetricsAddress | None:
    """`HOST:PORT` (or `tcp://HOST:PORT`, `:PORT`, `[V6]:PORT`) read strictly; None when it turns metrics off."""
    text = text.strip()
    if text in OFF:
        return None
    bare = text.removeprefix("tcp://")
    host, colon, port = bare.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsEndpointError(f"metrics address {text!r} is not HOST:PORT (e.g. 127.0.0.1:26661; 0 or "
                                   f"empty turns metrics off)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return MetricsAddress(host, int(port))


def check_port_in_use_choice(choice: str) -> str:
    if choice not in PORT_IN_USE_CHOICES:
        raise MetricsEndpointError(f"metrics_port_in_use must be {' or '.join(PORT_IN_USE_CHOICES)}, not {choice!r}")
    return choice


class MetricsEndpoint:
    """A registry served over HTTP from a daemon thread, until `close`."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_endpoint(address: str, registry: CollectorRegistry, who: str,
                           port_in_use: str = CONTINUE) -> MetricsEndpoint | None:
    """Serve `registry` at `address` for `who` (the process, in messages): the endpoint, or None when the address
    turns metrics off or is taken and `port_in_use` is `continue` (logged, naming the address)."""
    check_port_in_use_choice(port_in_use)
    parsed = parse_metrics_address(address)
    if parsed is None:
        return None
    try:
        server, thread = start_http_server(parsed.port, addr=parsed.host or "0.0.0.0", registry=registry)
    except OSError as error:
        reason = error.strerror or str(error)
        if port_in_use == REFUSE:
            raise MetricsPortInUse(f"{who} cannot serve metrics on {parsed}: {reason} (metrics_port_in_use = "
                                   f"refuse; free the port, choose another address, or 0 to turn metrics off)") from None
        log.warning("%s serves no metrics: %s is not available (%s); going on without them "
                    "(metrics_port_in_use = continue)", who, parsed, reason)
        return None
    endpoint = MetricsEndpoint(server, thread)
    log.info("%s serves metrics at %s", who, endpoint.url)
    return endpoint
