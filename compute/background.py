"""One background thread that handles queued items in order: how the training loop hands off slow work.

The checkpoint hasher (`checkpoints.CheckpointHasher`) and the blob writer (`blobs.BlobWriter`) both take
work from the training thread (hash and store a checkpoint, write a blob) and do it beside training, in
submission order. Both need the same few rules, kept here once:

- the first error stops the work: later items are dropped, and the next `put` or `join` raises it (wrapped
  by the owner's `failure` function, so each keeps its own error type);
- `join` waits until everything queued so far is done; `close` joins and ends the thread;
- `on_start`, if given, is the thread's first call: the hook that keeps it off the training core during a
  pinned round (`Acceleration.keep_off_training_core`, handed down by whoever has the acceleration).

The handler runs on the background thread; it should spend its time in code that releases the GIL (hashing
large buffers, file writes, torch copies) so that the training thread keeps running.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")

_STOP = object()


class BackgroundQueue(Generic[Item]):
    def __init__(self, handle: Callable[[Item], None], *, name: str,
                 failure: Callable[[BaseException], Exception], on_start: Callable[[], None] | None = None) -> None:
        self._handle = handle
        self._on_start = on_start
        self._failure = failure
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, item: Item) -> None:
        self._raise_if_failed()
        self._queue.put(item)

    def join(self) -> None:
        """Wait for every item queued so far; raise the first error of the handler."""
        self._queue.join()
        self._raise_if_failed()

    def close(self) -> None:
        """Stop the thread once the queue is drained (errors are not raised here: call `join` first)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._failure(self._error) from self._error

    def _run(self) -> None:
        if self._on_start is not None:
            self._on_start()  # e.g. beside training, not on its core (`compute.acceleration.affinity`)
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if self._error is None:
                    self._handle(item)
            except BaseException as error:  # reported to the submitting thread by put()/join()
                self._error = error
            finally:
                self._queue.task_done()
