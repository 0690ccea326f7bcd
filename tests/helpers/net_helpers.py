"""Network helpers the tests share: ports nothing listens on, for a server a test is about to start or for a
URL that must find nobody."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports the kernel had free on `host` just now, all held open together while they are
    chosen (so that no two are the same). They are released on return: a process started next takes them."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            probe.bind((host, 0))
            probes.append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One TCP port the kernel had free on `host` just now (see `free_ports`)."""
    return free_ports(1, host)[0]


@contextlib.contextmanager
def held_address(host: str = "127.0.0.1"):
    """`host:port` of a TCP port another socket listens on for as long as the block runs: a taken address."""
    with socket.socket() as holder:
        holder.bind((host, 0))
        holder.listen()
        yield f"{host}:{holder.getsockname()[1]}"
