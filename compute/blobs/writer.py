"""Write blobs to a store from a background thread, so a training loop does not wait on the disk.

Storing a round's checkpoints is tens of megabytes of page-cache writes, CPU time in the kernel. A worker
needs them on disk before a verifier asks (blocks after it commits), not before it trains on: `BlobWriter`
queues (digest, bytes) and writes them while the next segments train; `flush()` waits for everything queued
and re-raises the first write error. `on_start`: the writing thread's first call (in a pinned round, the
acceleration's `keep_off_training_core`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..background import BackgroundQueue
from .errors import BlobError
from .store import BlobStore


class BlobWriter:
    def __init__(self, store: BlobStore, on_start: Callable[[], None] | None = None) -> None:
        self.store = store
        self._queue: BackgroundQueue[tuple[str, bytes]] = BackgroundQueue(
            self._write, name="blob-writer", failure=lambda error: BlobError(f"blob write failed: {error}"),
            on_start=on_start)

    def write(self, digest: str, data: bytes) -> None:
        """Queue bytes this process hashed itself (see `BlobStore.put_hashed`)."""
        self._queue.put((digest, data))

    def _write(self, item: tuple[str, bytes]) -> None:
        digest, data = item
        self.store.put_hashed(data, digest)

    def flush(self) -> None:
        self._queue.join()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._queue.close()

    def __enter__(self) -> "BlobWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
