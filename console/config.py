"""What a console serves with, chosen once at the edge (`trolly-console`'s flags) and handed to every page's API.

The console signs with the keys of a wallet home (`--home`, the wallet's own `TROLLY_WALLET_HOME`) and keeps
what it makes for the pages (uploads, packed data, fetched models, round evaluations) under `<home>/console/`.
"""

from __future__ import annotations

import dataclasses
import pathlib

from aiohttp import web

from trolly.compute.blobs import AddressPolicy
from trolly.wallet.keyring import Keyring
from trolly.wallet.nonces import NonceCache
from trolly.wallet.passwords import PasswordSource


@dataclasses.dataclass(frozen=True)
class ConsoleConfig:
    node_url: str
    home: pathlib.Path
    """The wallet home whose keyring signs (the same keys `trolly-wallet --home` uses)."""
    keyring_backend: str = "file"
    allow_private_addresses: bool = False
    """Fetch blobs (round updates, final weights) from loopback and private addresses: a localnet's workers."""
    data_host: str = "127.0.0.1"
    """The address the console serves a submitted task's data on (a free port each)."""

    @property
    def work(self) -> pathlib.Path:
        return self.home / "console"

    @property
    def addresses(self) -> AddressPolicy:
        return AddressPolicy(self.allow_private_addresses)

    def keyring(self, password: str | None = None) -> Keyring:
        """This home's keyring; with `password`, one that unlocks with it, once, and is then thrown away (the
        password is never kept: each signing builds a keyring of its own)."""
        source = PasswordSource.fixed(password) if password is not None else PasswordSource(environment={})
        return Keyring(self.home, self.keyring_backend, source)

    def nonce_cache(self) -> NonceCache:
        return NonceCache(self.home)

    def directory(self, name: str) -> pathlib.Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path


CONFIG = web.AppKey("config", ConsoleConfig)
"""Where the app keeps its `ConsoleConfig`, for every page's API."""
