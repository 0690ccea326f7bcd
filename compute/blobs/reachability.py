"""Whether a blob service can be reached from outside, asked of a probe: a service elsewhere fetches one blob from
it and says whether the right bytes came back. A worker cannot tell this by itself (its own connections to its
own address prove nothing behind NAT or a firewall), so `trolly-worker preflight --probe URL` asks the blob relay
that validators run beside their verifier (`trolly-verifier relay` mounts the route: `add_probe_route`).

    POST /probe   {"url": "<blob service base URL>", "blob": "<sha256 hex>"}
      200 {"reachable": true, "seconds": 0.004}
      200 {"reachable": false, "detail": "http://203.0.113.7:8600/blobs/...: gave up after 1 attempts (...)"}
      400 {"error": "..."}                            a malformed request

The probe is no open proxy: it only GETs `<url>/blobs/<hash>`, connects only where its address policy allows
(no loopback, private or cloud metadata addresses unless a localnet's relay allows private ones), follows no
redirect, reads at most `PROBE_BLOB_LIMIT` bytes in one attempt bounded by `PROBE_TIMEOUT`, and answers only
whether bytes with that hash came back: that the worker's own service served them, not anyone else's.
"""

from __future__ import annotations

import time

import aiohttp
from aiohttp import web

from .client import BlobClient, RetryPolicy
from .connect_policy import AddressPolicy
from .errors import BlobError
from .store import check_blob_hash

PROBE_BLOB_LIMIT = 4096
"""Largest blob a probe fetches: a probe blob is a few random bytes."""

PROBE_TIMEOUT = 10.0
"""Seconds the probe waits for the blob service."""

POLICY_KEY = web.AppKey("probe_addresses", AddressPolicy)


async def probe(request: web.Request) -> web.Response:
    """Fetch the named blob from the named blob service and say whether it came back, checked."""
    try:
        document = await request.json()
        url, digest = document["url"], document["blob"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 256:
            raise ValueError("url must be an http(s) URL of at most 256 characters")
        check_blob_hash(digest)
    except (ValueError, KeyError, TypeError, BlobError) as error:
        return web.json_response({"error": f"a probe takes {{'url': <http(s) URL>, 'blob': <sha256 hex>}}: {error}"},
                                 status=400)
    began = time.monotonic()
    retry = RetryPolicy(attempts=1, request_timeout=PROBE_TIMEOUT)
    try:
        async with BlobClient([url], retry=retry, max_blob_size=PROBE_BLOB_LIMIT,
                              address_policy=request.app[POLICY_KEY]) as client:
            await client.fetch(digest)
    except BlobError as error:
        return web.json_response({"reachable": False, "detail": str(error)})
    return web.json_response({"reachable": True, "seconds": round(time.monotonic() - began, 3)})


def add_probe_route(app: web.Application, addresses: AddressPolicy) -> None:
    """Serve `POST /probe` on `app`, fetching only where `addresses` allows."""
    app[POLICY_KEY] = addresses
    app.router.add_post("/probe", probe)


async def ask_probe(probe_url: str, blob_url: str, digest: str, timeout: float = 3 * PROBE_TIMEOUT) -> tuple[bool, str]:
    """Ask the probe at `probe_url` to fetch blob `digest` from `blob_url`: (reachable, what it said). A probe that
    does not answer raises BlobError (nothing was checked)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.post(f"{probe_url.rstrip('/')}/probe", json={"url": blob_url, "blob": digest},
                                    allow_redirects=False) as response:
                answer = await response.json(content_type=None)
                if response.status != 200:
                    raise BlobError(f"the probe at {probe_url} refused: HTTP {response.status}: "
                                    f"{answer.get('error', answer) if isinstance(answer, dict) else answer}")
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        raise BlobError(f"the probe at {probe_url} did not answer: {type(error).__name__}: {error}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("reachable"), bool):
        raise BlobError(f"the probe at {probe_url} answered something else than a probe's answer: {answer!r}")
    if answer["reachable"]:
        return True, f"the probe at {probe_url} fetched a blob from {blob_url} in {answer.get('seconds', '?')} s"
    return False, f"the probe at {probe_url} could not fetch from {blob_url}: {answer.get('detail', '')}"
