"""Write blobs to a store from a background thread, so a training loop does not wait on the disk.

Storing a round's checkpoints is tens of megabytes of page-cache writes, CPU time in the kernel. A worker
needs them on disk before a verifier asks (blocks after it commits), not before it trains on: `BlobWriter`
queues (digest, bytes) and writes them while the next segments train; `flush()` waits for everything queued
and re-raises the first write error.
"""

from __future__ import annotations

import queue
import threading

from .errors import BlobError
from .store import BlobStore


class BlobWriter:
    def __init__(self, store: BlobStore) -> None:
        self.store = store
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="blob-writer", daemon=True)
        self._thread.start()

    def write(self, digest: str, data: bytes) -> None:
        """Queue bytes this process hashed itself (see `BlobStore.put_hashed`)."""
        if self._error is not None:
            raise BlobError(f"an earlier blob write failed: {self._error}") from self._error
        self._queue.put((digest, data))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    self.store.put_hashed(item[1], item[0])
            except BaseException as error:  # reported by flush()/write()
                self._error = error
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        self._queue.join()
        if self._error is not None:
            raise BlobError(f"blob write failed: {self._error}") from self._error

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> "BlobWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
