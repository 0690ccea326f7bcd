"""The node's state-sync snapshots on disk: taken every `interval` blocks, served to peers, the last few kept.

    <directory>/<height, 20 digits>-<format>/metadata        the canonical metadata (`snapshot_format`)
    <directory>/<height, 20 digits>-<format>/chunk-<index>   the payload's chunks

`after_commit(store, height)` runs on the consensus path right after Commit: at a multiple of `interval` it
takes the store's point-in-time snapshot (a LevelDB snapshot: O(1), the commit's state whatever blocks follow)
and hands the writing to one background thread, so block execution does not wait for serialization. A snapshot
is written into a temporary directory and renamed into place once complete, so `list` never sees half of one;
after each new one, all but the newest `keep_recent` are deleted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from trolly.wallet.files import install_directory, write_atomically

from .snapshot_format import CHUNK_BYTES, FORMAT, SnapshotError, SnapshotMetadata, chunk_payload, parse_metadata
from .store import Store, StoreSnapshot

log = logging.getLogger("trolly.abci.snapshots")

_NAME = re.compile(r"(\d{20})-(\d+)")


class SnapshotStore:
    """Snapshots under `directory`; `interval` 0 takes none (but still serves those on disk)."""

    def __init__(self, directory: str | os.PathLike, interval: int, keep_recent: int,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        if interval < 0 or keep_recent < 1 or chunk_bytes < 1:
            raise SnapshotError(f"snapshot interval must be >= 0 and keep_recent >= 1, got {interval}, {keep_recent}")
        self.directory = pathlib.Path(directory)
        self.interval = interval
        self.keep_recent = keep_recent
        self.chunk_bytes = chunk_bytes
        self.last_seconds: float | None = None
        """How long the last snapshot took to write (for logs and metrics)."""
        self.on_written: Callable[[float], None] | None = None
        """Told the seconds each snapshot took to write, on the writing thread (the app's snapshot metric)."""
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        self._pending: list[Future] = []
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(".partial-*"):  # a snapshot cut short by a crash
            shutil.rmtree(leftover, ignore_errors=True)

    # -- taking -------------------------------------------------------------------------------------------
    def due(self, height: int) -> bool:
        return self.interval > 0 and height > 0 and height % self.interval == 0

    def after_commit(self, store: Store, height: int) -> Future | None:
        """At a snapshot height, freeze the store's state now and write it on the background thread."""
        if not self.due(height):
            return None
        frozen = store.snapshot()
        if frozen.height != height:
            raise SnapshotError(f"snapshot wanted at height {height}, the store is at {frozen.height}")
        future = self._writer.submit(self._write_logged, frozen)
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()] + [future]
        return future

    def _write_logged(self, frozen: StoreSnapshot) -> SnapshotMetadata | None:
        started = time.monotonic()
        try:
            metadata = self.write(frozen)
        except Exception:  # noqa: BLE001 - a failed snapshot must not stop the node; the next one may succeed
            log.exception("snapshot at height %d failed", frozen.height)
            return None
        self.last_seconds = time.monotonic() - started
        if self.on_written is not None:
            self.on_written(self.last_seconds)
        log.info("snapshot at height %d: %d entries, %d chunks, %.2fs", metadata.height, metadata.entries,
                 metadata.chunks, self.last_seconds)
        return metadata

    def write(self, frozen: StoreSnapshot) -> SnapshotMetadata:
        """Serialize `frozen` into this store's directory (replacing one of the same height) and prune."""
        partial = self.directory / f".partial-{frozen.height}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        hashes = []
        entries = payload = 0
        for index, (chunk, entries) in enumerate(chunk_payload(frozen.iterate(b""), self.chunk_bytes)):
            write_atomically(partial / f"chunk-{index}", chunk)
            hashes.append(_sha256(chunk))
            payload += len(chunk)
        metadata = SnapshotMetadata(frozen.height, frozen.app_hash, tuple(hashes), entries, payload)
        write_atomically(partial / "metadata", metadata.to_bytes())
        final = self._path(frozen.height, FORMAT)
        shutil.rmtree(final, ignore_errors=True)
        install_directory(partial, final)
        self.prune()
        return metadata

    def prune(self) -> None:
        for height, format_ in self._names()[self.keep_recent:]:
            shutil.rmtree(self._path(height, format_), ignore_errors=True)

    def wait(self) -> None:
        """Return once every snapshot started so far is written (tests; before the store closes)."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.result()

    def close(self) -> None:
        self.wait()
        self._writer.shutdown(wait=True)

    # -- serving ------------------------------------------------------------------------------------------
    def list(self) -> list[tuple[SnapshotMetadata, bytes]]:
        """(metadata, its exact bytes) of every complete snapshot, newest first; unreadable ones skipped."""
        found = []
        for height, format_ in self._names():
            try:
                raw = (self._path(height, format_) / "metadata").read_bytes()
                found.append((parse_metadata(raw), raw))
            except (OSError, SnapshotError) as exc:
                log.warning("skipping snapshot at height %d: %s", height, exc)
        return found

    def load_chunk(self, height: int, format_: int, index: int) -> bytes:
        """Chunk `index` of a snapshot held here; b"" (CometBFT: missing) when there is none."""
        if height < 1 or format_ < 0 or index < 0:
            return b""
        try:
            return (self._path(height, format_) / f"chunk-{index}").read_bytes()
        except OSError:
            return b""

    def _path(self, height: int, format_: int) -> pathlib.Path:
        return self.directory / f"{height:020d}-{format_}"

    def _names(self) -> list[tuple[int, int]]:
        names = []
        for entry in self.directory.iterdir():
            match = _NAME.fullmatch(entry.name)
            if match:
                names.append((int(match.group(1)), int(match.group(2))))
        return sorted(names, reverse=True)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()
