"""Where the ABCI application listens: `tcp://host:port` or `unix://path`, parsed by one rule.

The app's server listens by it (`server.AbciServer`), the solo engine connects by it (`engine.abci_client`),
the node's CLI and the localnet choose their sockets with it. A module of its own, importing nothing of the
server, so that what connects to the app does not load the app's server to read an address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import AbciAppError

MAX_UNIX_PATH_BYTES = 107
"""Longest socket path Linux accepts (`sun_path` is 108 bytes with its terminating NUL)."""

SOCKET_NAME = "app.sock"
"""The application's socket file name inside a home's (or a state directory's) `data/` directory."""


def unix_socket_fits(path: str | os.PathLike) -> bool:
    """Whether `bind_private_unix_socket` can listen at `path`: the path, and the private path it binds first
    beside it (`.abci-XXXXXXXX/s`, longer than a socket's file name), must both fit a socket address."""
    staging = os.path.join(os.path.dirname(os.path.abspath(path)), ".abci-XXXXXXXX", "s")
    return max(len(os.fsencode(path)), len(os.fsencode(staging))) <= MAX_UNIX_PATH_BYTES


def default_unix_address(directory: str | os.PathLike) -> str:
    """`unix://DIRECTORY/app.sock` with DIRECTORY made absolute; AddressError if that path is too long for a
    socket (then an explicit `unix://SHORTER` or `tcp://HOST:PORT` address is needed)."""
    path = os.path.join(os.path.abspath(directory), SOCKET_NAME)
    if not unix_socket_fits(path):
        raise AddressError(f"the default socket path {path} is longer than a unix socket allows "
                           f"({MAX_UNIX_PATH_BYTES} bytes); give an address: unix://SHORTER_PATH or tcp://HOST:PORT")
    return f"unix://{path}"


class AddressError(AbciAppError):
    """An ABCI listen address is not `tcp://host:port` or `unix://path`."""


@dataclass(frozen=True)
class ListenAddress:
    scheme: str  # "tcp" or "unix"
    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        return f"unix://{self.path}" if self.scheme == "unix" else f"tcp://{self.host}:{self.port}"


def parse_address(text: str) -> ListenAddress:
    """`tcp://127.0.0.1:26658`, `127.0.0.1:26658` (tcp implied) or `unix:///path/to/socket`."""
    if text.startswith("unix://"):
        path = text[len("unix://"):]
        if not path:
            raise AddressError(f"unix address {text!r} has no path")
        return ListenAddress("unix", path=path)
    rest = text[len("tcp://"):] if text.startswith("tcp://") else text
    if "://" in rest:
        raise AddressError(f"invalid ABCI address {text!r}: expected tcp://host:port or unix://path")
    host, separator, port = rest.rpartition(":")
    if not separator or not port.isdigit() or not host:
        raise AddressError(f"invalid ABCI address {text!r}: expected tcp://host:port or unix://path")
    if not 0 <= int(port) <= 65535:
        raise AddressError(f"invalid port in {text!r}")
    return ListenAddress("tcp", host=host.strip("[]"), port=int(port))
