"""What can go wrong storing or fetching a blob, one class per case."""

from ..errors import ComputeError


class BlobError(ComputeError):
    """Base of every blob store, server or client failure."""


class InvalidBlobHash(BlobError):
    """A blob name is not 64 lower-case hex digits."""


class BlobNotFound(BlobError):
    """No server holds the blob (HTTP 404 everywhere, or absent from the local store)."""


class BlobHashMismatch(BlobError):
    """The bytes received (or offered) do not hash to the blob's name."""


class BlobTooLarge(BlobError):
    """The blob exceeds the size limit."""


class BlobRejected(BlobError):
    """The server refused the request (unauthorized, malformed); retrying will not help."""


class BlobUnavailable(BlobError):
    """Every server failed (connection refused, timeout, 5xx) even after the retries."""


class BlobAddressRefused(BlobRejected):
    """The blob URL's host is (or resolves only to) an address fetches may not connect to: loopback, private,
    link-local, cloud metadata... (`connect_policy.py`), unless the node allows private hosts."""


class BlobRedirectRefused(BlobRejected):
    """The server answered with a redirect: blob fetches follow none (it could point anywhere)."""
