"""What a blob relay keeps: the blobs workers pushed, by hash, and who pushed which for which task.

    <root>/blobs/<2 hex>/<hex>                 the bytes (a `BlobStore`: one copy however many pushed them)
    <root>/tasks/<task id>/<worker>.json       {"blobs": {hash: size}, "listings": {round: [hash, ...]}}

Storage is bounded twice: a worker may hold at most `task_quota` bytes for one task (each blob it pushed
counted in full, even one another worker pushed too), and the relay at most `total_quota` in all. A settled
task is evicted whole (`evict_task`): its records go, and so does every blob no other task's record names.
Every file is written atomically (`trolly.wallet.files`), so a crash leaves the old record or the new one, and
records change under one lock: the relay stores pushes on worker threads, and two pushes at once must not
lose each other's entry (nor the reference counts their eviction relies on).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import shutil
import threading

from trolly.wallet.files import write_atomically

from .errors import BlobError, BlobNotFound
from .store import DEFAULT_MAX_BLOB_SIZE, BlobStore, check_blob_hash

DEFAULT_TASK_QUOTA = 8 * 2**30
"""Bytes one worker may keep on a relay for one task: a few rounds of checkpoints of a mid-sized model."""
DEFAULT_TOTAL_QUOTA = 64 * 2**30
"""Bytes a relay keeps in all."""


class QuotaExceeded(BlobError):
    """A push would take a worker's share of a task, or the relay, over its bound (HTTP 507)."""


class RelayStore:
    def __init__(self, root: str | os.PathLike, *, task_quota: int = DEFAULT_TASK_QUOTA,
                 total_quota: int = DEFAULT_TOTAL_QUOTA, max_blob_size: int = DEFAULT_MAX_BLOB_SIZE) -> None:
        self.root = pathlib.Path(root)
        self.blobs = BlobStore(self.root, max_blob_size=max_blob_size)
        self.task_quota = task_quota
        self.total_quota = total_quota
        self._lock = threading.Lock()
        self.references: collections.Counter[str] = collections.Counter()
        """How many records name each blob (read from the records once, then kept up to date)."""
        self.total = 0
        """Bytes of the blobs the records name, each counted once."""
        for path in (self.root / "tasks").glob("*/*.json"):
            for digest, size in json.loads(path.read_bytes())["blobs"].items():
                self.total += size if not self.references[digest] else 0
                self.references[digest] += 1

    def _record_path(self, task_id: int, worker: str) -> pathlib.Path:
        return self.root / "tasks" / str(task_id) / f"{worker}.json"

    def record(self, task_id: int, worker: str) -> dict:
        """What `worker` pushed for `task_id`: {"blobs": {hash: size}, "listings": {round: [hash, ...]}}."""
        try:
            return json.loads(self._record_path(task_id, worker).read_bytes())
        except FileNotFoundError:
            return {"blobs": {}, "listings": {}}

    def _save(self, task_id: int, worker: str, record: dict) -> None:
        write_atomically(self._record_path(task_id, worker), json.dumps(record, sort_keys=True).encode())

    def check_room(self, task_id: int, worker: str, digest: str, size: int) -> None:
        """Raise `QuotaExceeded` unless `worker` may add a blob of `size` bytes to `task_id` (before it is read)."""
        held = self.record(task_id, worker)["blobs"]
        if digest in held:
            return
        used = sum(held.values())
        if used + size > self.task_quota:
            raise QuotaExceeded(f"{worker} holds {used} bytes for task {task_id} here; {size} more would pass the "
                                f"relay's quota of {self.task_quota} bytes per worker and task")
        if not self.references[digest] and self.total + size > self.total_quota:
            raise QuotaExceeded(f"the relay holds {self.total} bytes; {size} more would pass its bound of "
                                f"{self.total_quota}")

    def add(self, task_id: int, worker: str, data: bytes, digest: str) -> bool:
        """Store `data` (refused unless it hashes to `digest`) under `worker`'s record for `task_id`; False when
        that record already named it."""
        self.check_room(task_id, worker, digest, len(data))
        self.blobs.put(data, expected=digest)  # outside the lock: other pushes' writes need not wait for it
        with self._lock:
            self.check_room(task_id, worker, digest, len(data))
            record = self.record(task_id, worker)
            if digest in record["blobs"]:
                return False
            if not self.blobs.has(digest):  # evicted with another task in between
                self.blobs.put(data, expected=digest)
            record["blobs"][digest] = len(data)
            self._save(task_id, worker, record)
            if not self.references[digest]:
                self.total += len(data)
            self.references[digest] += 1
            return True

    def set_listing(self, task_id: int, worker: str, round_index: int, hashes: list[str]) -> None:
        """Record `worker`'s checkpoint listing of a round; each checkpoint must be one it pushed for the task."""
        with self._lock:
            record = self.record(task_id, worker)
            for digest in hashes:
                check_blob_hash(digest)
                if digest not in record["blobs"]:
                    raise BlobNotFound(f"checkpoint {digest} was not pushed by {worker} for task {task_id}")
            record["listings"][str(round_index)] = list(hashes)
            self._save(task_id, worker, record)

    def listing(self, task_id: int, worker: str, round_index: int) -> list[str]:
        hashes = self.record(task_id, worker)["listings"].get(str(round_index))
        if hashes is None:
            raise BlobNotFound(f"no checkpoints of {worker} recorded for task {task_id} round {round_index}")
        return hashes

    def tasks(self) -> list[int]:
        """The tasks some worker pushed for, ascending."""
        directory = self.root / "tasks"
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdecimal()) if directory.is_dir() else []

    def evict_task(self, task_id: int) -> int:
        """Forget `task_id`: its records, and the blobs no other task's record names. Returns the bytes freed."""
        directory = self.root / "tasks" / str(task_id)
        with self._lock:
            if not directory.is_dir():
                return 0
            named = [json.loads(path.read_bytes())["blobs"] for path in directory.glob("*.json")]
            shutil.rmtree(directory)
            freed = 0
            for blobs in named:
                for digest, size in blobs.items():
                    self.references[digest] -= 1
                    if self.references[digest] > 0:
                        continue
                    del self.references[digest]
                    self.total -= size
                    freed += size
                    self.blobs.path(digest).unlink(missing_ok=True)
            return freed
