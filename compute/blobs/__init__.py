"""Content-addressed blobs over HTTP: a filesystem store, an aiohttp server and a checking client.

Every blob (encoded update, checkpoint, weights, dataset manifest or shard) is named by the hex sha256 of its
bytes. The server (`BlobServer`) lets anyone `GET /blobs/<hex>` and only its owner (a bearer token) `PUT` or
`POST`; it also serves a round's checkpoint listing (docs/protocol.md section 3). The client (`BlobClient`)
checks the hash of everything it fetches, retries transient failures with exponential backoff across the
given base URLs, and raises a typed `BlobError` that says what went wrong.
"""

from .client import BlobClient, RetryPolicy, fetch_dataset
from .errors import (BlobError, BlobHashMismatch, BlobNotFound, BlobRejected, BlobTooLarge, BlobUnavailable,
                     InvalidBlobHash)
from .server import BlobServer, build_app
from .store import BlobStore, DEFAULT_MAX_BLOB_SIZE
from .writer import BlobWriter

__all__ = ["BlobWriter", "BlobClient", "RetryPolicy", "fetch_dataset", "BlobServer", "build_app", "BlobStore",
           "DEFAULT_MAX_BLOB_SIZE", "BlobError", "BlobHashMismatch", "BlobNotFound", "BlobRejected", "BlobTooLarge",
           "BlobUnavailable", "InvalidBlobHash"]
