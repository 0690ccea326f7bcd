"""Safe by default: every request must name this machine as its Host and come from a session that the console's
access token opened (`access.py`), and every state change must come from the console's own page, carrying its
session's CSRF token.

- **Host**: only `127.0.0.1` or `localhost` (with any port); anything else is refused, so a web page that
  points a name of its own at 127.0.0.1 (DNS rebinding) cannot read the console through it.
- **Access token**: `GET /anything?token=<the token>` opens a session (a random id in an HttpOnly,
  SameSite=Strict cookie) and redirects to the same address without the token, so it stays out of the
  history and of what the page can read; a wrong token is refused.
- **Session**: every other request, pages, the built bundle and every `/api/` route alike, is refused with 403
  unless it carries a live session's cookie. Nothing is served without one, not even the bundle (public code):
  a page of another site, or another local user, can then neither drive the console nor tell that one runs.
  A request that reads (GET) changes nothing and starts no unbounded work; whatever does is a POST.
- **State changes** (POST, PUT, PATCH, DELETE): refused with 403, before any handler runs, unless `Origin`
  is the console's own and `X-CSRF-Token` is the session's token (handed to the page by `GET /api/session`).
- **Framing**: every answer says `frame-ancestors 'none'` and `X-Frame-Options: DENY`, so no page can frame the
  console to make its user click in it; and `Referrer-Policy: no-referrer`, so no address of it leaves it.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from .access import Access

SESSION_COOKIE = "trolly_console_session"
"""The cookie's name, followed by the console's port: a browser sends a host's cookies to all its ports, so two
consoles on one machine (a localnet's and another) would otherwise overwrite each other's sessions."""
CSRF_HEADER = "X-CSRF-Token"
TOKEN_PARAMETER = "token"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_TOKEN = web.RequestKey("csrf_token", str)
"""The session's token, for the handler that hands it to the page."""
RESPONSE_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
NO_SESSION = ("this console answers only the browser that opened it through the address it printed when it "
              "started (http://127.0.0.1:PORT/?token=...); open that address again (a session ends after a while "
              "unused)")


def refuse(request: web.Request, reason: str) -> web.Response:
    """403 with `reason`: JSON for the API, text for a page (which a person reads)."""
    if request.path.startswith("/api/"):
        return web.json_response({"error": reason}, status=403)
    return web.Response(status=403, text=f"Trolly console: {reason}\n", content_type="text/plain")


def host_name(host: str) -> str:
    """The name part of a Host header (`127.0.0.1:8080` -> `127.0.0.1`, `[::1]:80` -> `[::1]`)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if ":" in host else host


def session_cookie(request: web.Request) -> str:
    """The name of this console's session cookie: `SESSION_COOKIE` and the port the request came to."""
    return f"{SESSION_COOKIE}_{request.url.port}"


def make_guard(access: Access):
    """The middleware that enforces the module docstring's rules."""

    @web.middleware
    async def guard(request: web.Request, handler):
        if host_name(request.host or "") not in LOCAL_HOSTS:
            return refuse(request, f"the console answers only on 127.0.0.1 or localhost, not {request.host!r}")
        if TOKEN_PARAMETER in request.query:
            return open_session(request, access)
        token = access.sessions.csrf_token_of(request.cookies.get(session_cookie(request)))
        if token is None:
            return refuse(request, NO_SESSION)
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("Origin")
            if origin != f"{request.scheme}://{request.host}":
                return refuse(request, f"a state change from another origin ({origin or 'none given'}) is refused")
            sent = request.headers.get(CSRF_HEADER, "")
            if not hmac.compare_digest(sent.encode(), token.encode()):
                return refuse(request, "a state change without this session's CSRF token is refused")
        request[CSRF_TOKEN] = token
        return await handler(request)

    return guard


def open_session(request: web.Request, access: Access) -> web.Response:
    """A GET carrying the access token: a new session's cookie, and the same address without the token."""
    if request.method not in ("GET", "HEAD") or not access.admits(request.query[TOKEN_PARAMETER]):
        return refuse(request, "that is not this console's access token: open the address it printed when it "
                               "started")
    clean = request.rel_url.with_query({k: v for k, v in request.query.items() if k != TOKEN_PARAMETER})
    response = web.Response(status=303, headers={"Location": str(clean), "Cache-Control": "no-store"})
    response.set_cookie(session_cookie(request), access.sessions.open(), httponly=True, samesite="Strict", path="/")
    return response


async def add_response_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the framing and referrer headers on every answer (refusals, errors and files too)."""
    response.headers.update(RESPONSE_HEADERS)
