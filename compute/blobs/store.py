"""A content-addressed blob store on the local filesystem.

Layout under the root: `blobs/<first two hex>/<hex>` and
`tasks/<task_id>/rounds/<round>/checkpoints.json`. Writes go to a temporary file (created exclusively, mode
0600), which is fsynced before it is renamed into place and its directory fsynced after
(`trolly.wallet.files`), so neither a crash nor a power loss leaves a partial blob under a valid name.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import threading
from collections.abc import Callable

from trolly.wallet.files import create_temporary, install, make_directories, write_all

from .direct import DIRECT_MINIMUM, DirectScratch, write_direct
from .errors import BlobHashMismatch, BlobNotFound, BlobTooLarge, InvalidBlobHash

DEFAULT_MAX_BLOB_SIZE = 256 * 1024 * 1024
_HEX = frozenset("0123456789abcdef")


def check_blob_hash(digest: str) -> str:
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
        raise InvalidBlobHash(f"blob hash must be 64 lower-case hex digits, got {str(digest)[:80]!r}")
    return digest


def _write_atomically(path: pathlib.Path, data: bytes, scratch: DirectScratch | None = None) -> None:
    make_directories(path.parent)
    install(_write_temporary(path.parent, data, scratch), path)


def _write_temporary(directory: pathlib.Path, data: bytes, scratch: DirectScratch | None = None) -> pathlib.Path:
    """`data` in a new temporary file in `directory`, on the disk (fsynced) before it is given a name by
    `install` (which fsyncs the directory after the rename); removed again if writing fails. `scratch`: the
    direct writes' buffers for unaligned bytes (`direct.write_direct`)."""
    descriptor, temporary = create_temporary(directory, "incoming")
    try:
        try:
            # Large blobs (checkpoints) go past the page cache: far less CPU, see direct.py.
            if not (memoryview(data).nbytes >= DIRECT_MINIMUM and write_direct(temporary, (data,), scratch)):
                os.ftruncate(descriptor, 0)  # whatever a refused direct write left
                write_all(descriptor, data)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def _sha256_hex(data) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    """The blobs under `root`.

    `put_hashing` hashes on a thread of the store's own, created by the first call: on Linux a thread takes
    the CPUs of the thread that creates it, so in a worker's round (where the first call comes from the
    checkpoint thread, which keeps off the training core) the hashing thread keeps off it too. `keep_off`, if
    given, is that thread's first call instead (`Acceleration.keep_off_training_core`). The store also keeps
    the scratch buffers its direct writes copy unaligned bytes through (`direct.DirectScratch`)."""

    def __init__(self, root: str | os.PathLike, max_blob_size: int = DEFAULT_MAX_BLOB_SIZE,
                 keep_off: Callable[[], None] | None = None) -> None:
        self.root = pathlib.Path(root)
        self.max_blob_size = max_blob_size
        self._keep_off = keep_off
        self._hasher: concurrent.futures.ThreadPoolExecutor | None = None  # see put_hashing
        self._hasher_lock = threading.Lock()
        self._scratch = DirectScratch()
        make_directories(self.root / "blobs")

    def _hashing_thread(self) -> concurrent.futures.ThreadPoolExecutor:
        """The one thread `put_hashing` hashes on, beside the writing thread (its threads end with the store)."""
        with self._hasher_lock:
            if self._hasher is None:
                self._hasher = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="blob-hash", initializer=self._keep_off)
            return self._hasher

    def path(self, digest: str) -> pathlib.Path:
        check_blob_hash(digest)
        return self.root / "blobs" / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put(self, data: bytes, expected: str | None = None) -> str:
        """Store `data`; returns its hex sha256. With `expected`, refuse bytes that hash to anything else."""
        if len(data) > self.max_blob_size:
            raise BlobTooLarge(f"blob of {len(data)} bytes exceeds the limit of {self.max_blob_size}")
        digest = hashlib.sha256(data).hexdigest()
        if expected is not None and check_blob_hash(expected) != digest:
            raise BlobHashMismatch(f"bytes hash to {digest}, not {expected}")
        path = self.path(digest)
        if not path.is_file():
            _write_atomically(path, data, self._scratch)
        return digest

    def put_hashed(self, data: bytes, digest: str) -> str:
        """Store bytes this process has just hashed itself (e.g. a `HashedCheckpoint`), without hashing them
        again. Only for digests computed from exactly these bytes; anything received from outside goes
        through `put(data, expected=...)`."""
        if len(data) > self.max_blob_size:
            raise BlobTooLarge(f"blob of {len(data)} bytes exceeds the limit of {self.max_blob_size}")
        path = self.path(digest)
        if not path.is_file():
            _write_atomically(path, data, self._scratch)
        return digest

    def put_hashing(self, data: bytes | bytearray | memoryview) -> str:
        """`put(data)` with the hash overlapping the write: another thread (the store's, see the class) hashes
        the bytes while this one writes them to a temporary file, which takes its name once both are over. For
        large blobs of our own making (checkpoints), whose hashing and direct write take comparable time.

        The write is issued from this thread at once and the hash runs while it waits for the device: the other
        way round, the writing thread had to wait for a turn on a core busy hashing (both keep off the training
        core), and a checkpoint took longer from its copy to its store (docs/performance.md)."""
        if len(data) > self.max_blob_size:
            raise BlobTooLarge(f"blob of {len(data)} bytes exceeds the limit of {self.max_blob_size}")
        hashing = self._hashing_thread().submit(_sha256_hex, data)
        try:
            temporary = _write_temporary(self.root / "blobs", data, self._scratch)
        except BaseException:
            concurrent.futures.wait([hashing])  # the caller may reuse the buffer once this returns
            raise
        try:
            digest = hashing.result()
            path = self.path(digest)
            if path.is_file():
                temporary.unlink()
            else:
                make_directories(path.parent)
                install(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return digest

    def discard(self, digest: str) -> None:
        """Remove the blob `digest` if the store holds it (one whose bytes no longer match its name)."""
        self.path(digest).unlink(missing_ok=True)

    def get(self, digest: str) -> bytes:
        path = self.path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(f"blob {digest} is not in the store") from None

    def _listing_path(self, task_id: int, round_index: int) -> pathlib.Path:
        for name, value in (("task_id", task_id), ("round", round_index)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**64:
                raise ValueError(f"{name} must be an unsigned 64-bit integer, got {value!r}")
        return self.root / "tasks" / str(task_id) / "rounds" / str(round_index) / "checkpoints.json"

    def set_checkpoints(self, task_id: int, round_index: int, hashes: list[str]) -> None:
        """Record a round's checkpoint hashes (in checkpoint order); each must already be stored."""
        for digest in hashes:
            if not self.has(digest):
                raise BlobNotFound(f"checkpoint {digest} is not in the store")
        document = json.dumps({"checkpoint_hashes": list(hashes)}, separators=(",", ":")).encode()
        _write_atomically(self._listing_path(task_id, round_index), document)

    def get_checkpoints(self, task_id: int, round_index: int) -> list[str]:
        try:
            return json.loads(self._listing_path(task_id, round_index).read_bytes())["checkpoint_hashes"]
        except FileNotFoundError:
            raise BlobNotFound(f"no checkpoints recorded for task {task_id} round {round_index}") from None
