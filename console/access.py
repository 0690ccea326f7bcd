"""Who may use the console: whoever holds its access token, and the browser sessions that token opened.

As a notebook server does, the console has a secret for its whole life (its access token, random per start
unless the one who starts it hands it one: `TROLLY_CONSOLE_TOKEN`, which a localnet keeps 0600 in its home so
its printed address survives a restart of the console) and prints its address with it
(`http://127.0.0.1:PORT/?token=...`). Opening that address opens a session: a random id in an HttpOnly,
SameSite=Strict cookie (`security.py` sets it and sends the browser on to the address without the token). No
other local user and no other web page knows the token, so none can open a session, and without one every
request is refused.

Sessions are bounded in number (the least recently used goes first when a new one would pass `MAX_SESSIONS`)
and expire: after `SESSION_IDLE_SECONDS` without a request, and `SESSION_LIFETIME_SECONDS` after they were
opened, whatever happens; then the page must be opened again through the printed address.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from aiohttp import web

MIN_TOKEN_CHARACTERS = 32
"""The shortest access token accepted from the environment: 32 URL-safe characters carry 190 bits or more."""
MAX_SESSIONS = 32
"""Open sessions kept; a browser opening the address again makes a new one, so this bounds what a leaked or
much-reopened address can make the console hold."""
SESSION_IDLE_SECONDS = 12 * 3600
"""A session that sent no request for this long has ended (an open page keeps its session alive: it asks the
console at every block)."""
SESSION_LIFETIME_SECONDS = 7 * 24 * 3600
"""A session ends this long after it was opened, used or not."""


class TokenRefused(ValueError):
    """An access token handed to the console that is too short or not URL-safe text."""


def check_token(token: str) -> str:
    """`token` when it can be an access token: at least `MIN_TOKEN_CHARACTERS` of letters, digits, `-` and `_`."""
    if len(token) < MIN_TOKEN_CHARACTERS or not all(c.isascii() and (c.isalnum() or c in "-_") for c in token):
        raise TokenRefused(f"an access token must be at least {MIN_TOKEN_CHARACTERS} letters, digits, '-' or '_'")
    return token


@dataclasses.dataclass
class Session:
    csrf_token: str
    opened: float
    last_seen: float


class Sessions:
    """Session id -> its CSRF token and times, for this server's life (kept in memory only)."""

    def __init__(self, limit: int = MAX_SESSIONS, idle_seconds: float = SESSION_IDLE_SECONDS,
                 lifetime_seconds: float = SESSION_LIFETIME_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.lifetime_seconds = lifetime_seconds
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        """Least recently used first."""

    def __len__(self) -> int:
        self._forget_expired()
        return len(self._sessions)

    def csrf_token_of(self, session_id: str | None) -> str | None:
        """The CSRF token of a live session (which counts as used now), None for no session or one that
        ended."""
        self._forget_expired()
        session = self._sessions.get(session_id) if session_id else None
        if session is None:
            return None
        session.last_seen = self.clock()
        self._sessions.move_to_end(session_id)
        return session.csrf_token

    def open(self) -> str:
        """A new session's id; the least recently used session ends when there would be more than `limit`."""
        self._forget_expired()
        while len(self._sessions) >= self.limit:
            self._sessions.popitem(last=False)
        session_id, now = secrets.token_urlsafe(32), self.clock()
        self._sessions[session_id] = Session(secrets.token_urlsafe(32), now, now)
        return session_id

    def _forget_expired(self) -> None:
        now = self.clock()
        for session_id, session in list(self._sessions.items()):
            if now - session.last_seen >= self.idle_seconds or now - session.opened >= self.lifetime_seconds:
                del self._sessions[session_id]


class Access:
    """The console's access token and the sessions it opened."""

    def __init__(self, token: str | None = None, sessions: Sessions | None = None) -> None:
        self.token = check_token(token) if token is not None else secrets.token_urlsafe(32)
        self.sessions = sessions if sessions is not None else Sessions()

    def admits(self, offered: str) -> bool:
        """Whether `offered` is the access token (compared in constant time)."""
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def address(self, base_url: str) -> str:
        """The address to open the console at: `base_url` (ending in /) with the token."""
        return f"{base_url}?token={self.token}"


ACCESS = web.AppKey("access", Access)
"""Where the app keeps its `Access`."""
