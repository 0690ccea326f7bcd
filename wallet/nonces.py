"""A short-lived memory of the nonces this wallet home has just used, reconciled with the node.

The node's `/account` query answers from committed state, so right after a send it still reports the old
nonce while the transaction waits in the mempool. A second quick send that trusted it would reuse the nonce
and be refused. So when a transaction is planned (and again when CheckTx accepts it) the wallet writes
`nonce + 1` here, and the next transaction takes the larger of the node's nonce and this one; two
transactions planned before either is sent (a service doing several things at once, or `--generate-only`
twice) get consecutive nonces. Entries expire after `ttl_seconds` (a
transaction that was dropped from the mempool would otherwise leave a gap forever); a sender that still hits
a nonce refusal forgets the entry and retries once with the node's nonce.
"""

from __future__ import annotations

import json
import pathlib
import time

from .files import write_private_file

DEFAULT_TTL_SECONDS = 60.0


class NonceCache:
    """The memory kept in `<home>/nonces.json`, so that separate CLI invocations share it."""

    def __init__(self, home: str | pathlib.Path, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self.path = pathlib.Path(home).expanduser() / "nonces.json"
        self.ttl_seconds = ttl_seconds

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_bytes())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save(self, data: dict) -> None:
        write_private_file(self.path, json.dumps(data, sort_keys=True, indent=1).encode())

    def next_nonce(self, address: str, node_nonce: int, now: float | None = None) -> int:
        """The nonce to use: the node's, or a larger one remembered from a recent send."""
        entry = self._load().get(address)
        now = time.time() if now is None else now
        if not isinstance(entry, dict) or now - float(entry.get("time", 0)) > self.ttl_seconds:
            return node_nonce
        return max(node_nonce, int(entry.get("next_nonce", 0)))

    def remember(self, address: str, next_nonce: int, now: float | None = None) -> None:
        data = self._load()
        now = time.time() if now is None else now
        # drop expired entries so the file never grows without bound
        data = {a: e for a, e in data.items() if isinstance(e, dict) and now - float(e.get("time", 0)) <= self.ttl_seconds}
        data[address] = {"next_nonce": next_nonce, "time": now}
        self._save(data)

    def advance(self, address: str, next_nonce: int, now: float | None = None) -> None:
        """Remember `next_nonce` unless a larger one is already remembered (never moves backwards)."""
        now = time.time() if now is None else now
        self.remember(address, max(next_nonce, self.next_nonce(address, 0, now)), now)

    def release(self, address: str, nonce: int) -> None:
        """Give back a reserved `nonce` whose transaction was not sent, if no later one was reserved since."""
        if self.next_nonce(address, 0) == nonce + 1:
            self.remember(address, nonce)

    def forget(self, address: str) -> None:
        data = self._load()
        if data.pop(address, None) is not None:
            self._save(data)


class MemoryNonceCache(NonceCache):
    """The same memory held in the process only: for long-running services (the worker, the verifier)."""

    def __init__(self, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self.path = None
        self.ttl_seconds = ttl_seconds
        self._data: dict = {}

    def _load(self) -> dict:
        return dict(self._data)

    def _save(self, data: dict) -> None:
        self._data = dict(data)
