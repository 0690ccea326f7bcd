"""Content-addressed blobs over HTTP: a filesystem store, an aiohttp server and a checking client.

Every blob (encoded update, checkpoint, weights, dataset manifest or shard) is named by the hex sha256 of its
bytes. The server (`BlobServer`) lets anyone `GET /blobs/<hex>` and only its owner (a bearer token) `PUT` or
`POST`; it also serves a round's checkpoint listing (docs/protocol.md section 3). The client (`BlobClient`)
checks the hash of everything it fetches, retries transient failures with exponential backoff across the
given base URLs, connects only to addresses its `AddressPolicy` allows (no private or metadata hosts unless
the node allows them), follows no redirect, and raises a typed `BlobError` that says what went wrong. The
server caps connections per peer and in all and times out slow senders (`ConnectionLimits`, connections.py).

The store and the errors import nothing heavy; the client, server and writer (aiohttp, torch) are imported
on first use, so that the checkpoint writer process (`compute.acceleration.checkpoint_process_main`) can use
the store without loading torch.
"""

from __future__ import annotations

import importlib

from .errors import (BlobAddressRefused, BlobError, BlobHashMismatch, BlobNotFound, BlobRedirectRefused, BlobRejected,
                     BlobTooLarge, BlobUnavailable, InvalidBlobHash)
from .store import BlobStore, DEFAULT_MAX_BLOB_SIZE

_LAZY = {"BlobClient": ".client", "RetryPolicy": ".client", "BlobServer": ".server",
         "build_app": ".server", "ConnectionLimits": ".connections", "BlobWriter": ".writer",
         "AddressPolicy": ".connect_policy", "blob_session": ".connect_policy"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BlobWriter", "BlobClient", "RetryPolicy", "BlobServer", "build_app", "ConnectionLimits",
           "BlobStore", "AddressPolicy", "blob_session", "DEFAULT_MAX_BLOB_SIZE", "BlobError", "BlobAddressRefused",
           "BlobHashMismatch", "BlobNotFound", "BlobRedirectRefused", "BlobRejected", "BlobTooLarge", "BlobUnavailable",
           "InvalidBlobHash"]
