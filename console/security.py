"""Safe by default: every request must name this machine as its Host, and every state change must come from
the console's own page, carrying its session's CSRF token.

- **Host**: only `127.0.0.1` or `localhost` (with any port); anything else is refused, so a web page that
  points a name of its own at 127.0.0.1 (DNS rebinding) cannot read the console through it.
- **Session**: a random id in an HttpOnly, SameSite=Strict cookie, set on the first request; its CSRF token
  is random too, kept here and handed to the page by `GET /api/session` (which another origin cannot read).
- **State changes** (POST, PUT, PATCH, DELETE): refused with 403, before any handler runs, unless `Origin`
  is the console's own and `X-CSRF-Token` is the session's token.
"""

from __future__ import annotations

import hmac
import secrets

from aiohttp import web

SESSION_COOKIE = "trolly_console_session"
CSRF_HEADER = "X-CSRF-Token"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_TOKEN = web.RequestKey("csrf_token", str)
"""The session's token, for the handler that hands it to the page."""
NEW_SESSION = web.RequestKey("new_session", str)


class Sessions:
    """Session id -> CSRF token, for this server's life (the console keeps no state on disk)."""

    def __init__(self) -> None:
        self._tokens: dict[str, str] = {}

    def token_of(self, session: str | None) -> str | None:
        return self._tokens.get(session) if session else None

    def new(self) -> tuple[str, str]:
        session, token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._tokens[session] = token
        return session, token


def refuse(reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=403)


def host_name(host: str) -> str:
    """The name part of a Host header (`127.0.0.1:8080` -> `127.0.0.1`, `[::1]:80` -> `[::1]`)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if ":" in host else host


def make_guard(sessions: Sessions):
    """The middleware that enforces the module docstring's rules."""

    @web.middleware
    async def guard(request: web.Request, handler):
        if host_name(request.host or "") not in LOCAL_HOSTS:
            return refuse(f"the console answers only on 127.0.0.1 or localhost, not {request.host!r}")
        session = request.cookies.get(SESSION_COOKIE)
        token = sessions.token_of(session)
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("Origin")
            if origin != f"{request.scheme}://{request.host}":
                return refuse(f"a state change from another origin ({origin or 'none given'}) is refused")
            sent = request.headers.get(CSRF_HEADER, "")
            if token is None or not hmac.compare_digest(sent.encode(), token.encode()):
                return refuse("a state change without this session's CSRF token is refused")
        if token is None:
            session, token = sessions.new()
            request[NEW_SESSION] = session
        request[CSRF_TOKEN] = token
        response = await handler(request)
        if NEW_SESSION in request and not response.prepared:
            response.set_cookie(SESSION_COOKIE, request[NEW_SESSION], httponly=True, samesite="Strict", path="/")
        return response

    return guard
