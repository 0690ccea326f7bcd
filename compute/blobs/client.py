"""The blob client: fetch by hash from any of several servers, check every byte, retry with backoff.

    async with BlobClient(["http://127.0.0.1:8600"]) as client:
        data = await client.fetch(digest)            # sha256(data).hexdigest() == digest, always

A 404 from a server moves on to the next; connection errors, timeouts and 5xx are retried (exponential
backoff, `RetryPolicy`) and end in `BlobUnavailable`; a body that does not hash to its name is discarded and
the next server tried, ending in `BlobHashMismatch`. Nothing unchecked is ever returned.

Blob URLs come from strangers, so the client connects only where its `AddressPolicy` allows (no loopback,
private, link-local or metadata address unless the node allows private hosts: `connect_policy.py`), checked on
the address each connection is made to, and it follows no redirect: a 3xx answer is a failed fetch
(`BlobRedirectRefused`), as is a refused address (`BlobAddressRefused`). Neither is retried.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Sequence

import aiohttp

from .connect_policy import AddressPolicy, GuardedConnector, blob_session
from .errors import (BlobAddressRefused, BlobError, BlobHashMismatch, BlobNotFound, BlobRedirectRefused, BlobRejected,
                     BlobTooLarge, BlobUnavailable)
from .store import DEFAULT_MAX_BLOB_SIZE, check_blob_hash


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """attempts per server; delay before retry n is min(initial_delay * 2**n, max_delay) seconds."""

    attempts: int = 4
    initial_delay: float = 0.2
    max_delay: float = 5.0
    request_timeout: float = 60.0

    def delay(self, attempt: int) -> float:
        return min(self.initial_delay * 2**attempt, self.max_delay)


class _Transient(Exception):
    """A failure worth retrying (connection, timeout, 5xx)."""


class BlobClient:
    def __init__(self, base_urls: Sequence[str] | str, *, owner_token: str = "", retry: RetryPolicy = RetryPolicy(),
                 max_blob_size: int = DEFAULT_MAX_BLOB_SIZE, address_policy: AddressPolicy = AddressPolicy(),
                 resolver: aiohttp.abc.AbstractResolver | None = None,
                 session: aiohttp.ClientSession | None = None) -> None:
        """`address_policy`: where connections may go (the default refuses private hosts); `resolver`: the name
        resolver under the policy (default: the system's, `getaddrinfo` in a thread); `session`: one shared
        between clients, made by `addresses.blob_session` (no other kind is accepted: it would bypass the
        policy)."""
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise BlobError("a blob client needs at least one base URL")
        if session is not None and not isinstance(session.connector, GuardedConnector):
            raise BlobError("a blob client's session must come from blob_session(), which guards its connections")
        self.base_urls = [url.rstrip("/") for url in urls]
        self.owner_token = owner_token
        self.retry = retry
        self.max_blob_size = max_blob_size
        self.address_policy = address_policy
        self._resolver = resolver
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> "BlobClient":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = blob_session(self.address_policy, self.retry.request_timeout, self._resolver)
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.owner_token}"} if self.owner_token else {}

    async def _with_retries(self, operation, what: str):
        """Run `operation()` until it succeeds or raises a non-transient error; backoff between attempts."""
        last: Exception | None = None
        for attempt in range(self.retry.attempts):
            if attempt:
                await asyncio.sleep(self.retry.delay(attempt - 1))
            try:
                return await operation()
            except _Transient as error:
                last = error
        raise BlobUnavailable(f"{what}: gave up after {self.retry.attempts} attempts ({last})")

    async def _get_once(self, url: str) -> bytes:
        return (await self._receive(url, hashed=False))[0]

    async def _get_hashed_once(self, url: str) -> tuple[bytes, str]:
        """The body and its sha256 (hex), hashed piece by piece as it arrives: the hashing overlaps the
        transfer, reads each piece while it is in the cache, and never holds the event loop for a whole
        checkpoint at once; nothing hashes the body again."""
        return await self._receive(url, hashed=True)

    async def _receive(self, url: str, *, hashed: bool) -> tuple[bytes, str]:
        digest = hashlib.sha256() if hashed else None
        try:
            async with self._client().get(url, allow_redirects=False) as response:
                _refuse_redirect(url, response)
                if response.status == 404:
                    raise BlobNotFound(f"{url}: not found")
                if response.status >= 500:
                    raise _Transient(f"{url}: HTTP {response.status}")
                if response.status != 200:
                    raise BlobRejected(f"{url}: HTTP {response.status}: {await response.text()}")
                if response.content_length is not None and response.content_length > self.max_blob_size:
                    raise BlobTooLarge(f"{url}: {response.content_length} bytes exceeds the limit of {self.max_blob_size}")
                pieces, size = [], 0
                async for piece in response.content.iter_chunked(1 << 16):
                    size += len(piece)
                    if size > self.max_blob_size:
                        raise BlobTooLarge(f"{url}: body exceeds the limit of {self.max_blob_size} bytes")
                    if digest is not None:
                        digest.update(piece)
                    pieces.append(piece)
                return b"".join(pieces), digest.hexdigest() if digest is not None else ""
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as error:
            raise _Transient(f"{url}: {type(error).__name__}: {error}") from None

    async def fetch(self, digest: str) -> bytes:
        """The blob's bytes, checked against `digest`, from the first server that has it."""
        check_blob_hash(digest)
        failures: list[BlobError] = []
        for base in self.base_urls:
            url = f"{base}/blobs/{digest}"
            try:
                data, received = await self._with_retries(lambda: self._get_hashed_once(url), url)
            except (BlobNotFound, BlobUnavailable, BlobRejected) as error:
                failures.append(error)
                continue
            if received != digest:
                failures.append(BlobHashMismatch(f"{url}: received bytes hash to {received}"))
                continue
            return data
        for kind in (BlobHashMismatch, BlobUnavailable, BlobAddressRefused, BlobRedirectRefused, BlobRejected):
            if any(isinstance(f, kind) for f in failures):
                raise kind(f"blob {digest}: " + "; ".join(str(f) for f in failures))
        raise BlobNotFound(f"blob {digest} not found on {', '.join(self.base_urls)}")

    async def _send(self, method: str, path: str, body: bytes, content_type: str) -> dict:
        """Send to the first base URL (the owner's own server) with retries; returns the JSON answer."""
        url = f"{self.base_urls[0]}{path}"

        async def once() -> dict:
            try:
                headers = {**self._headers(), "Content-Type": content_type}
                async with self._client().request(method, url, data=body, headers=headers,
                                                  allow_redirects=False) as response:
                    _refuse_redirect(url, response)
                    text = await response.text()
                    if response.status >= 500:
                        raise _Transient(f"{url}: HTTP {response.status}")
                    if response.status == 413:
                        raise BlobTooLarge(f"{url}: {text}")
                    if response.status == 400 and "hash" in text:
                        raise BlobHashMismatch(f"{url}: {text}")
                    if response.status not in (200, 201):
                        raise BlobRejected(f"{url}: HTTP {response.status}: {text}")
                    return json.loads(text)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as error:
                raise _Transient(f"{url}: {type(error).__name__}: {error}") from None

        return await self._with_retries(once, url)

    async def put(self, data: bytes) -> str:
        """Upload to the owner's server; returns the hex hash (checked against what the server computed)."""
        if len(data) > self.max_blob_size:
            raise BlobTooLarge(f"blob of {len(data)} bytes exceeds the limit of {self.max_blob_size}")
        digest = hashlib.sha256(data).hexdigest()
        answer = await self._send("PUT", f"/blobs/{digest}", data, "application/octet-stream")
        if answer.get("hash") != digest:
            raise BlobHashMismatch(f"server stored {answer.get('hash')}, expected {digest}")
        return digest

    async def put_checkpoints(self, task_id: int, round_index: int, hashes: Sequence[str]) -> None:
        body = json.dumps({"checkpoint_hashes": list(hashes)}).encode()
        await self._send("PUT", f"/tasks/{task_id}/rounds/{round_index}/checkpoints", body, "application/json")

    async def checkpoint_hashes(self, task_id: int, round_index: int) -> list[str]:
        """A round's checkpoint listing from the first server that has it."""
        failures = []
        for base in self.base_urls:
            url = f"{base}/tasks/{task_id}/rounds/{round_index}/checkpoints"
            try:
                data = await self._with_retries(lambda: self._get_once(url), url)
                hashes = json.loads(data)["checkpoint_hashes"]
                for digest in hashes:
                    check_blob_hash(digest)
                return hashes
            except (BlobNotFound, BlobUnavailable, BlobRejected) as error:
                failures.append(error)
            except (ValueError, KeyError, TypeError) as error:
                failures.append(BlobRejected(f"{url}: malformed listing: {error}"))
        raise BlobNotFound(f"no checkpoint listing for task {task_id} round {round_index}: "
                           + "; ".join(str(f) for f in failures))


def _refuse_redirect(url: str, response: aiohttp.ClientResponse) -> None:
    if 300 <= response.status < 400:
        target = response.headers.get("Location", "nowhere")
        raise BlobRedirectRefused(f"{url}: HTTP {response.status} redirect to {target[:200]!r} refused: "
                                  f"blob fetches follow no redirect")

