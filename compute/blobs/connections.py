"""How many connections the blob service holds, and from whom.

Anyone who can reach a worker's blob port can open connections and keep them open. Unbounded, a single peer
takes every file descriptor the process may have: the server stops accepting (other peers, verifiers
included, wait in the kernel's backlog) and the worker cannot open its own store's files. Verifiers that
cannot fetch a checkpoint vote UNAVAILABLE, so the flood would get an honest worker's round failed.

`ConnectionLimits` bounds that: at most `per_peer` connections from one peer (an IPv4 address, or an IPv6
/64, the block one subscriber usually holds; IPv4-mapped addresses count as their IPv4 address) and at most
`total` in all, the total kept below the process's file limit with `reserved_descriptors` left for the store,
the worker's own fetches and everything else the process opens. A peer never holds more than half of the
total, so another peer always finds room. A connection beyond a cap is accepted and closed at once: accepting
frees the kernel's backlog for others, and closing gives the descriptor straight back.

Slow senders are timed out too: headers must be complete within `header_timeout` seconds of the connection or
of the previous response (aiohttp's keep-alive timer, which closes a connection still waiting for a complete
request), and an owner's upload body within `body_timeout`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionLimits:
    per_peer: int = 32
    """Connections one peer (address, or IPv6 /64) may hold at once."""
    total: int = 1024
    """Connections in all, before the file limit lowers it (see `admitted_total`)."""
    reserved_descriptors: int = 128
    """Descriptors kept free beside those already open when the server starts: the store's files, the worker's
    own fetches and RPC connections."""
    header_timeout: float = 10.0
    """Seconds a connection may take to send a complete request head (and may stay idle between requests)."""
    body_timeout: float = 120.0
    """Seconds an upload's body may take, whatever its size (uploads come from the owner, on its own host)."""

    def __post_init__(self) -> None:
        if self.per_peer < 1 or self.total < 1 or self.reserved_descriptors < 0:
            raise ValueError("connection limits must be positive")
        if not (self.header_timeout > 0 and self.body_timeout > 0):
            raise ValueError("timeouts must be positive")


def open_descriptors() -> int:
    """How many file descriptors this process holds now (Linux's /proc; 0 where it cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def admitted_total(limits: ConnectionLimits, file_limit: int | None = None, already_open: int | None = None) -> int:
    """The total cap actually applied: `limits.total`, lowered so that the connections, the descriptors open
    now and the reserved ones fit under the soft file limit (at least one connection)."""
    if file_limit is None:
        file_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if already_open is None:
        already_open = open_descriptors()
    if file_limit == resource.RLIM_INFINITY:
        return limits.total
    return max(1, min(limits.total, file_limit - already_open - limits.reserved_descriptors))


def peer_of(address: str) -> str:
    """The key connections are counted under: the IPv4 address, or the /64 of an IPv6 one."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class ConnectionGuard:
    """Counts the connections held by peer and in all; `protocol_factory` wraps a server's protocol factory so
    that a connection beyond a cap is closed as soon as it is accepted."""

    def __init__(self, limits: ConnectionLimits, total: int) -> None:
        self.total = total
        self.per_peer = max(1, min(limits.per_peer, total // 2))
        self._by_peer: dict[str, int] = {}
        self.held = 0
        self.refused = 0

    def admit(self, peer: str) -> bool:
        if self.held >= self.total or self._by_peer.get(peer, 0) >= self.per_peer:
            self.refused += 1
            return False
        self._by_peer[peer] = self._by_peer.get(peer, 0) + 1
        self.held += 1
        return True

    def release(self, peer: str) -> None:
        self.held -= 1
        left = self._by_peer[peer] - 1
        if left:
            self._by_peer[peer] = left
        else:
            del self._by_peer[peer]

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _GuardedProtocol(self, inner)


class _GuardedProtocol(asyncio.Protocol):
    """Admits a connection through the guard, then hands every event to the server's own protocol."""

    def __init__(self, guard: ConnectionGuard, inner: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._make_inner = inner
        self._inner: asyncio.Protocol | None = None
        self._peer: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        address = transport.get_extra_info("peername")
        peer = peer_of(str(address[0])) if address else ""
        if not self._guard.admit(peer):
            transport.abort()  # the descriptor is closed at once; nothing is read or written
            return
        self._peer = peer
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is not None:
            self._guard.release(self._peer)
            self._peer = None
        if self._inner is not None:
            self._inner.connection_lost(exc)
