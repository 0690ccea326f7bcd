"""CORS for the blob services a browser worker talks to: public reads, and the relay's signed pushes.

A worker in a browser tab (docs/browser-worker.md) runs on a page of another origin than the services it talks
to: it fetches the dataset's shards and the other workers' updates from blob services and relays (GET), and
pushes its own blobs and listings to its relay (a signed PUT). A browser lets the page read those answers only
when they say `Access-Control-Allow-Origin`, and sends a PUT with the signature headers only after a preflight
(`OPTIONS`) allowed it.

What is allowed, and why it is safe for any origin (`*`):

- **Reads** (GET, HEAD) of blobs, listings and health, on a blob service and on a relay: the bytes are public
  and named by their hash, every fetcher checks them, and no request carries a credential (the answer never
  says `Allow-Credentials`), so any page reading them learns what anyone may fetch.
- **A relay's pushes** (PUT under `/workers/...`): a push is authorized by the worker's ed25519 signature in
  its `Trolly-*` headers (`relay_auth.py`), never by a cookie or an address, so a page of any origin can push
  no more than the holder of the key could without a browser. The preflight names PUT and those headers only;
  the relay's answers to pushes (a refusal's reason included) are readable, so the page shows why.
- **Nothing else.** A blob service's owner writes (PUT and POST with a bearer token) get no preflight answer,
  so no page can send them; the relay's reachability probe (`POST /probe`) neither.
"""

from __future__ import annotations

from aiohttp import web

from .relay_auth import SIGNED_HEADERS

ANY_ORIGIN = "*"
READ_METHODS = frozenset({"GET", "HEAD"})
PUSH_METHOD = "PUT"
PUSH_PREFIX = "/workers/"
"""Where a relay takes signed pushes (blobs and listings); the only paths whose PUT a preflight allows."""
PREFLIGHT_MAX_AGE = "600"
"""Seconds a browser may keep a preflight's answer: a tab pushes several blobs a round to the same relay."""
PUSH_HEADERS = ", ".join(("Content-Type", *SIGNED_HEADERS))


def public_reads(pushes: bool = False):
    """The middleware that answers CORS as the module docstring says: reads for any origin, and, when `pushes`
    (a relay), the preflight and the answers of signed pushes under `/workers/`."""

    @web.middleware
    async def cors(request: web.Request, handler):
        pushing = pushes and request.path.startswith(PUSH_PREFIX)
        if request.method == "OPTIONS" and "Origin" in request.headers:
            return _preflight(request, pushing)
        readable = request.method in READ_METHODS or (pushing and request.method == PUSH_METHOD)
        try:
            response = await handler(request)
        except web.HTTPException as refusal:  # a malformed path's 400, a 404: readable too, to say why
            if readable:
                refusal.headers["Access-Control-Allow-Origin"] = ANY_ORIGIN
            raise
        if readable:
            response.headers["Access-Control-Allow-Origin"] = ANY_ORIGIN
        return response

    return cors


def _preflight(request: web.Request, pushing: bool) -> web.Response:
    """The answer to a browser's preflight: a push (PUT with the signature headers) where `pushing`, else
    reads only; a method the path does not allow gets no CORS headers, and the browser sends nothing."""
    wanted = request.headers.get("Access-Control-Request-Method", "")
    if wanted in READ_METHODS:
        return web.Response(status=204, headers={"Access-Control-Allow-Origin": ANY_ORIGIN,
                                                 "Access-Control-Allow-Methods": "GET, HEAD",
                                                 "Access-Control-Max-Age": PREFLIGHT_MAX_AGE})
    if pushing and wanted == PUSH_METHOD:
        return web.Response(status=204, headers={"Access-Control-Allow-Origin": ANY_ORIGIN,
                                                 "Access-Control-Allow-Methods": PUSH_METHOD,
                                                 "Access-Control-Allow-Headers": PUSH_HEADERS,
                                                 "Access-Control-Max-Age": PREFLIGHT_MAX_AGE})
    return web.Response(status=403, text=f"{wanted or 'that method'} is not allowed from a web page here")
