"""Which addresses a blob fetch may connect to: no loopback, private, link-local or metadata services.

Blob URLs come from strangers: a worker registers its own on chain, a requester lists dataset URLs in a
task spec. Without a check, a registered `http://169.254.169.254/...` would have every worker and verifier
that fetches from it query its cloud provider's metadata service (credentials), and `http://127.0.0.1:26657`
would turn them into a proxy into their own node. The chain checks only a URL's shape; it cannot resolve
names (chain/market/urls.py). So every fetcher refuses, unless its operator allows private hosts:

    link-local        169.254.0.0/16, fe80::/10
    cloud metadata    169.254.169.254, fd00:ec2::254 (refused even when private hosts are allowed)
    loopback          127.0.0.0/8, ::1
    private           10/8, 172.16/12, 192.168/16 (RFC 1918), fc00::/7
    unspecified       0.0.0.0, ::
    multicast         224.0.0.0/4, ff00::/8
    not global        anything else not globally routable (0/8, 100.64/10, 240/4, documentation ranges...)

An IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
IPv4-translated `::ffff:0:a.b.c.d`, 6to4 `2002::/16`, NAT64 `64:ff9b::/96`) is judged by the IPv4 address as
well: a stack that still routes one of them reaches the IPv4 host.

The check is made on the address the socket actually connects to (`GuardedConnector`): the resolver drops
refused addresses from a name's answers, and the socket factory checks each address once more right before
`connect()`. The name is resolved once per connection and the connection goes to the address checked, so a
name that answers with a public address to a first lookup and a private one to a second (DNS rebinding)
gains nothing. IP literals, which aiohttp does not resolve, meet the same socket factory.

`allow_private` (the worker's and verifier's `allow_private_blob_hosts`, on in a localnet, whose blob
services listen on 127.0.0.1) lets every class through but cloud metadata.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from .errors import BlobAddressRefused

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
PRIVATE = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
IPV4_IN_LOW_BITS = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96"))
"""IPv6 prefixes whose last 32 bits are an IPv4 address: NAT64, IPv4-compatible, IPv4-translated (RFC 2765's
`::ffff:0:a.b.c.d`, one group longer than IPv4-mapped `::ffff:a.b.c.d`)."""


def refusal(address: Address) -> str | None:
    """Why a fetch may not connect to `address` (the class's name), or None when it is a public address."""
    for candidate in _with_embedded(address):
        reason = _refusal(candidate)
        if reason:
            return reason
    return None


def _with_embedded(address: Address) -> list[Address]:
    """The IPv4 addresses `address` carries, then `address` itself (the inner one names the class better)."""
    found = []
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if any(address in prefix for prefix in IPV4_IN_LOW_BITS) and not (address.is_loopback or
                                                                           address.is_unspecified):
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))  # `::1` and `::` name themselves
    return found + [address]


def _refusal(address: Address) -> str | None:
    if address in METADATA:
        return "cloud metadata"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if any(address in network for network in PRIVATE):
        return "private"
    if not address.is_global:
        return "not globally routable"
    return None


@dataclasses.dataclass(frozen=True)
class AddressPolicy:
    """What a blob fetch may connect to. The default refuses every class above; `allow_private=True` (a node's
    `allow_private_blob_hosts`) allows all but cloud metadata."""

    allow_private: bool = False

    def refusal(self, address: Address) -> str | None:
        reason = refusal(address)
        if reason is None or (self.allow_private and reason != "cloud metadata"):
            return None
        return reason

    def check(self, host: str) -> None:
        """Raise BlobAddressRefused unless `host` (an IP address in text form) may be connected to."""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise BlobAddressRefused(f"{host!r} is not an IP address") from None
        reason = self.refusal(address)
        if reason is not None:
            raise BlobAddressRefused(f"{host} is a {reason} address: blob fetches do not connect there"
                                     + ("" if reason == "cloud metadata" else
                                        " (a node that must, like a localnet, sets allow_private_blob_hosts)"))

    def socket_for(self, addr_info: tuple) -> socket.socket:
        """aiohttp's socket factory: checks the very address about to be connected to, then makes the socket."""
        family, kind, proto, _, sockaddr = addr_info
        self.check(sockaddr[0])
        return socket.socket(family=family, type=kind, proto=proto)


class PolicyResolver(AbstractResolver):
    """Resolves a name once (through `inner`) and keeps only the addresses the policy allows."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner or aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        answers = await self.inner.resolve(host, port, family)
        allowed, refused = [], []
        for answer in answers:
            try:
                self.policy.check(answer["host"])
            except BlobAddressRefused as error:
                refused.append(str(error))
            else:
                allowed.append(answer)
        if not allowed:
            raise BlobAddressRefused(f"{host} resolves only to refused addresses: " + "; ".join(refused))
        return allowed

    async def close(self) -> None:
        await self.inner.close()


class GuardedConnector(aiohttp.TCPConnector):
    """A TCP connector that connects only where `policy` allows (see the module docstring). Addresses are tried
    one after the other (no happy-eyeballs race), so that a refusal is reported as such."""

    def __init__(self, policy: AddressPolicy, resolver: AbstractResolver | None = None, **options) -> None:
        super().__init__(resolver=PolicyResolver(policy, resolver), socket_factory=policy.socket_for,
                         happy_eyeballs_delay=None, **options)
        self.policy = policy


def blob_session(policy: AddressPolicy, timeout: float, resolver: AbstractResolver | None = None
                 ) -> aiohttp.ClientSession:
    """An HTTP session for blob fetches: guarded connections, no proxy from the environment (`trust_env` off,
    so a proxy cannot connect where the policy would not). Redirects are refused per request by the client."""
    return aiohttp.ClientSession(connector=GuardedConnector(policy, resolver), trust_env=False,
                                 timeout=aiohttp.ClientTimeout(total=timeout))

