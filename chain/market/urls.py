"""The shape of a blob URL, checked on chain: stateless and the same on every node.

A worker registers the base URL of its blob service; workers and verifiers then fetch `<url>/blobs/<hash>`
from it. The chain accepts only a plain, unambiguous base URL:

    http[s]://<host>[:<port>][/<path>]

- scheme `http` or `https`, in lower case;
- host: a DNS name (labels of letters, digits and inner hyphens, 1..63 characters each, 253 in all, the last
  label not all digits), a dotted-quad IPv4 address (four decimal numbers 0..255 without leading zeros), or
  an IPv6 address in brackets (no zone);
- port, if given: decimal 1..65535 without leading zeros;
- no user information (`user:password@`), no query, no fragment, no backslash;
- the path: letters, digits and `-._~!$&'()*+,;=:@/`, `%` only before two hex digits;
- printable ASCII only (no whitespace, no control characters; an internationalized name goes in its
  `xn--` form), and at most `limit` bytes.

Every rule is spelled out here rather than taken from `urllib.parse` or `ipaddress`, whose leniency has changed
between Python releases: nodes on different interpreters must agree on which transactions fail.

A worker with no inbound route names a relay instead (`relay`, checked by the same rules, `check_relay_url`):
a blob relay it pushes its blobs to, which serves them under `relay_worker_url(relay, worker)`
(docs/protocol.md 3a). Fetchers read `<that URL>/blobs/<hash>` exactly as from a worker's own service.

Whether the host may be reached is not decided here: the chain cannot resolve names. Each fetcher refuses
loopback, private, link-local and metadata addresses itself, on the address it connects to
(`trolly.compute.blobs.connect_policy`).
"""

from __future__ import annotations

import re

from .errors import InvalidBlobUrl

MAX_URL_BYTES = 2048
"""Stateless ceiling; the market parameter `max_blob_url_bytes` is the real (lower) limit."""
MAX_HOST_CHARS = 253
MAX_LABEL_CHARS = 63

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_LABEL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_PATH = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/%")
_SCHEMES = ("http://", "https://")
# Character-by-character rules as patterns over ASCII text (explicit classes, no locale or Unicode tables), so
# that a URL of the full length costs one pass in C rather than a Python step per character.
_NOT_PRINTABLE = re.compile(r"[^!-~]")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_blob_url(url: str, limit: int = MAX_URL_BYTES) -> None:
    """Raise InvalidBlobUrl unless `url` is a base URL of the form above, at most `limit` bytes."""
    if not isinstance(url, str) or not url:
        raise InvalidBlobUrl("blob_url is required")
    if len(url) > limit:  # characters: at least as many bytes
        raise InvalidBlobUrl(f"blob_url is longer than the {limit} bytes allowed")
    if not url.isascii() or _NOT_PRINTABLE.search(url):
        raise InvalidBlobUrl("blob_url must be printable ASCII: no spaces, control characters or non-ASCII "
                             "letters (write an internationalized host name in its xn-- form)")
    scheme = next((s for s in _SCHEMES if url.startswith(s)), None)
    if scheme is None:
        raise InvalidBlobUrl("blob_url must start with http:// or https:// (lower case)")
    rest = url[len(scheme):]
    if "\\" in rest:
        raise InvalidBlobUrl("blob_url must not contain a backslash")
    if "?" in rest or "#" in rest:
        raise InvalidBlobUrl("blob_url is a base URL: no query (?) or fragment (#)")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        raise InvalidBlobUrl("blob_url must not carry user information (user:password@)")
    _check_authority(authority)
    if slash:
        _check_path(path)


def check_relay_url(url: str, limit: int = MAX_URL_BYTES) -> None:
    """`check_blob_url` for a worker's relay: the same rules, the errors naming `relay`."""
    try:
        check_blob_url(url, limit)
    except InvalidBlobUrl as error:
        raise InvalidBlobUrl(error.log.replace("blob_url", "relay")) from None


def relay_worker_url(relay: str, worker: str) -> str:
    """The base URL a relay serves one worker's blobs and checkpoint listings under (`worker`: its bech32
    address), which fetchers use instead of the worker's own blob URL."""
    return f"{relay.rstrip('/')}/workers/{worker}"


def _check_authority(authority: str) -> None:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise InvalidBlobUrl("blob_url has an unclosed [ in its host")
        host, after = authority[1:end], authority[end + 1:]
        if not is_ipv6_literal(host):
            raise InvalidBlobUrl(f"blob_url host [{host}] is not an IPv6 address")
        if after:
            if not after.startswith(":"):
                raise InvalidBlobUrl("blob_url has characters after its ] other than a port")
            _check_port(after[1:])
        return
    host, colon, port = authority.partition(":")
    if colon:
        _check_port(port)
    _check_host(host)


def _check_port(port: str) -> None:
    if not port or not set(port) <= _DIGITS or len(port) > 5 or port[0] == "0" or int(port) > 65535:
        raise InvalidBlobUrl(f"blob_url port must be a decimal number 1..65535, got {port[:8]!r}")


def _check_host(host: str) -> None:
    if not host:
        raise InvalidBlobUrl("blob_url has no host")
    labels = host.split(".")
    if all(label and set(label) <= _DIGITS for label in labels):
        if not is_ipv4_literal(host):
            raise InvalidBlobUrl(f"blob_url host {host!r} is not a dotted-quad IPv4 address (four numbers "
                                 f"0..255, no leading zeros)")
        return
    if len(host) > MAX_HOST_CHARS:
        raise InvalidBlobUrl(f"blob_url host name is longer than {MAX_HOST_CHARS} characters")
    for label in labels:
        if not (0 < len(label) <= MAX_LABEL_CHARS and set(label) <= _LABEL and label[0] != "-" and label[-1] != "-"):
            raise InvalidBlobUrl(f"blob_url host {host!r} is not a DNS name: each label 1..{MAX_LABEL_CHARS} "
                                 f"letters, digits or inner hyphens")
    if set(labels[-1]) <= _DIGITS:
        raise InvalidBlobUrl(f"blob_url host {host!r} ends in a number: neither a DNS name nor an IPv4 address")


def _check_path(path: str) -> None:
    if not set(path) <= _PATH:
        raise InvalidBlobUrl("blob_url path may hold only letters, digits and -._~!$&'()*+,;=:@/%")
    if _BAD_PERCENT.search(path):
        raise InvalidBlobUrl("blob_url path has a % not followed by two hex digits")


def is_ipv4_literal(text: str) -> bool:
    """Four decimal numbers 0..255 joined by dots, without leading zeros (an octal reading is ambiguous)."""
    parts = text.split(".")
    return len(parts) == 4 and all(
        0 < len(part) <= 3 and set(part) <= _DIGITS and (part == "0" or part[0] != "0") and int(part) <= 255
        for part in parts)


def is_ipv6_literal(text: str) -> bool:
    """RFC 4291 text form: eight groups of 1..4 hex digits, `::` at most once for a run of zero groups, the
    last 32 bits optionally as a dotted quad; no zone index."""
    if not text or not set(text) <= _HEX | {":", "."}:
        return False
    groups = 8
    if "." in text:
        head, colon, tail = text.rpartition(":")
        if not colon or not is_ipv4_literal(tail):
            return False
        # The colon before the dotted quad may be the second half of a "::" ("::1.2.3.4", "1::1.2.3.4").
        text, groups = (head + ":" if head.endswith(":") else head), 6
    if text.count("::") > 1:
        return False
    if "::" in text:
        left, right = text.split("::")
        parts = (left.split(":") if left else []) + (right.split(":") if right else [])
        if len(parts) > groups - 1:
            return False
    else:
        parts = text.split(":")
        if len(parts) != groups:
            return False
    return all(0 < len(part) <= 4 and set(part) <= _HEX for part in parts)
