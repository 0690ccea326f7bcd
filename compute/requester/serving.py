"""Serving a packed dataset's blob store from a background thread, for as long as a command needs it.

The wallet's commands run their node client on an event loop of their own; the blob server gets another,
on a thread of its own, so that `task submit --data` can keep serving the data while it follows the task.
"""

from __future__ import annotations

import asyncio
import threading

from ..blobs import BlobServer, BlobStore


class ServingThread:
    """A read-only blob server on host:port (0: a free port) on its own thread: `start`, `url`, `stop`."""

    def __init__(self, store: BlobStore, host: str, port: int) -> None:
        self.server = BlobServer(store, host=host, port=port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="data-server", daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> "ServingThread":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result()
        return self

    def stop(self) -> None:
        """Stop serving and end the thread; again, nothing (the follow and the command may both stop it)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()

    def __enter__(self) -> "ServingThread":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
