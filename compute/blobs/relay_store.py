"""What a blob relay keeps: the blobs workers pushed, by hash, and who pushed which for which task, in bounds.

Every byte a worker can make the relay keep is charged, to the worker's share of the task (`task_quota`) and to
the relay's total (`total_quota`): each blob it pushed in full (even one another worker pushed too; the total
counts its bytes once), each listing it set, and `entry_bytes` for every entry of either kind (the file, the
directory entry and the memory that name it: charged so that a quota bounds the number of entries, not only
their bytes). A listing names at most `max_listing_entries` checkpoints (a round's segments and one), each a
blob that worker pushed for the task. The records' layout is `relay_records.py`.

A push is charged before its body is read (`reserve`, from its Content-Length), so the pushes in flight never
take the relay past its bounds either; its body goes to a temporary file hashed as it is written
(`IncomingBlob`), which takes the blob's name only once the push is accepted (`commit`). A push refused for any
reason (quota, hash, a short body, an error) leaves no file, and its reservation is given back. Blobs no record
names (a crash between a blob's rename and its entry) and temporaries are removed when the store opens.

Two locks: `_index` guards the in-memory records and counts, and is held only for memory work (the event loop
takes it to reserve); `_files` orders the changes to the disk (commits, listings, evictions: worker threads
only), so that an eviction never removes a blob a commit has just found present.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
import pathlib
import shutil
import threading

from trolly.chain.market.params import MarketParams
from trolly.wallet.files import TEMPORARY_SUFFIX, create_temporary, install, make_directories, write_all, \
    write_atomically

from .errors import BlobError, BlobHashMismatch, BlobNotFound, BlobRejected
from .relay_records import Record, entry_path, listing_document, listing_path, load_records
from .store import DEFAULT_MAX_BLOB_SIZE, BlobStore, check_blob_hash

log = logging.getLogger(__name__)

DEFAULT_TASK_QUOTA = 8 * 2**30
"""Bytes one worker may keep on a relay for one task: a few rounds of checkpoints of a mid-sized model."""
DEFAULT_TOTAL_QUOTA = 64 * 2**30
"""Bytes a relay keeps in all."""
DEFAULT_ENTRY_BYTES = 4096
"""Bytes charged for each entry beyond its content: a file's block on common filesystems, which also covers
the relay's memory of the entry."""
DEFAULT_MAX_LISTING_ENTRIES = MarketParams().max_segments_per_round + 1
"""Checkpoints one listing may name: a round's checkpoints are its segments' boundaries."""


class QuotaExceeded(BlobError):
    """A push would take a worker's share of a task, or the relay, over its bound (HTTP 507)."""


@dataclasses.dataclass
class Reservation:
    """The room held for one push while its body is read (`RelayStore.reserve`)."""

    task_id: int
    worker: str
    digest: str
    size: int
    task_charge: int
    total_charge: int
    released: bool = False


class IncomingBlob:
    """A pushed body on its way to the disk: a temporary file beside the blobs, hashed as it is written. Its
    methods do file work: call them on a worker thread."""

    def __init__(self, directory: pathlib.Path) -> None:
        self._descriptor, self.path = create_temporary(directory, "incoming")
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        write_all(self._descriptor, data)
        self._hash.update(data)
        self.size += len(data)

    def finish(self) -> str:
        """Flush the bytes to the disk and close the file; returns their sha256 (hex)."""
        if self._descriptor >= 0:
            try:
                os.fsync(self._descriptor)
            finally:
                self._close()
        return self._hash.hexdigest()

    def discard(self) -> None:
        """Remove the temporary file (nothing when it has been installed as a blob)."""
        self._close()
        self.path.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1


class RelayStore:
    """The relay's blobs and records under `root`, within the quotas (see the module docstring). Opening it
    reads every record: do it off the event loop."""

    def __init__(self, root: str | os.PathLike, *, task_quota: int = DEFAULT_TASK_QUOTA,
                 total_quota: int = DEFAULT_TOTAL_QUOTA, max_blob_size: int = DEFAULT_MAX_BLOB_SIZE,
                 entry_bytes: int = DEFAULT_ENTRY_BYTES,
                 max_listing_entries: int = DEFAULT_MAX_LISTING_ENTRIES) -> None:
        self.root = pathlib.Path(root)
        self.blobs = BlobStore(self.root, max_blob_size=max_blob_size)
        self.task_quota = task_quota
        self.total_quota = total_quota
        self.entry_bytes = entry_bytes
        self.max_listing_entries = max_listing_entries
        self._index = threading.Lock()
        self._files = threading.Lock()
        self.records = load_records(self.root)
        self.references: collections.Counter[str] = collections.Counter()
        """How many records name each blob."""
        self.total = 0
        """Bytes charged to the relay for what it stores: each named blob once, and every record's entries."""
        self.reserved = 0
        """Bytes charged to the relay for pushes being read."""
        for record in self.records.values():
            record.used = self._record_charge(record)
            self.total += record.used - sum(record.blobs.values())
            for digest, size in record.blobs.items():
                self.total += size if not self.references[digest] else 0
                self.references[digest] += 1
        self._remove_unnamed_blobs()

    def _record_charge(self, record: Record) -> int:
        return sum(record.blobs.values()) + sum(record.listings.values()) + record.entries * self.entry_bytes

    def _remove_unnamed_blobs(self) -> None:
        for path in (self.root / "blobs").glob("*/*"):
            if path.name not in self.references:
                path.unlink(missing_ok=True)
        for path in (self.root / "blobs").glob(f".*{TEMPORARY_SUFFIX}"):
            path.unlink(missing_ok=True)

    # Memory only: safe on the event loop.

    def reserve(self, task_id: int, worker: str, digest: str, size: int) -> Reservation | None:
        """Hold room for `worker`'s push of blob `digest` (`size` bytes) for `task_id`, or raise `QuotaExceeded`;
        None when its record already names that blob (nothing to read)."""
        check_blob_hash(digest)
        with self._index:
            record = self.records.get((task_id, worker)) or Record()
            if digest in record.blobs:
                return None
            task_charge = size + self.entry_bytes
            total_charge = self.entry_bytes if self.references[digest] else task_charge
            self._check_room(record, task_id, worker, task_charge, total_charge)
            self.records[(task_id, worker)] = record
            record.reserved += task_charge
            self.reserved += total_charge
            return Reservation(task_id, worker, digest, size, task_charge, total_charge)

    def release(self, reservation: Reservation) -> None:
        """Give back a reservation's room (once; a no-op after `commit`)."""
        with self._index:
            self._release(reservation)

    def tasks(self) -> list[int]:
        """The tasks some worker holds something for, ascending."""
        with self._index:
            return sorted({task_id for task_id, _ in self.records})

    def _check_room(self, record: Record, task_id: int, worker: str, task_charge: int, total_charge: int) -> None:
        held = record.used + record.reserved
        if held + task_charge > self.task_quota:
            raise QuotaExceeded(f"{worker} holds {held} bytes for task {task_id} here (its blobs and listings, "
                                f"{self.entry_bytes} bytes an entry); {task_charge} more would pass the relay's "
                                f"quota of {self.task_quota} bytes per worker and task")
        if self.total + self.reserved + total_charge > self.total_quota:
            raise QuotaExceeded(f"the relay holds {self.total + self.reserved} bytes; {total_charge} more would "
                                f"pass its bound of {self.total_quota}")

    def _release(self, reservation: Reservation) -> None:
        if reservation.released:
            return
        reservation.released = True
        key = (reservation.task_id, reservation.worker)
        record = self.records[key]
        record.reserved -= reservation.task_charge
        self.reserved -= reservation.total_charge
        if record.empty:
            del self.records[key]

    # File work: call on a worker thread.

    def receive(self) -> IncomingBlob:
        """A temporary file for a push's body (`commit` or `IncomingBlob.discard` ends it)."""
        return IncomingBlob(self.root / "blobs")

    def commit(self, reservation: Reservation, incoming: IncomingBlob) -> bool:
        """Store the body `incoming` received for `reservation`, if it is the blob reserved for; False when the
        record named it already. Whatever happens, the reservation is given back and the temporary is gone
        (installed as the blob, or removed)."""
        try:
            digest = incoming.finish()
            if incoming.size != reservation.size:
                raise BlobRejected(f"the body has {incoming.size} bytes, not the {reservation.size} its "
                                   f"Content-Length states")
            if digest != reservation.digest:
                raise BlobHashMismatch(f"bytes hash to {digest}, not {reservation.digest}")
            with self._files:
                return self._store(reservation, incoming)
        finally:
            incoming.discard()
            self.release(reservation)

    def _store(self, reservation: Reservation, incoming: IncomingBlob) -> bool:
        task_id, worker, digest, size = reservation.task_id, reservation.worker, reservation.digest, reservation.size
        with self._index:
            if digest in self.records[(task_id, worker)].blobs:
                return False
            present = self.references[digest] > 0  # its file is there: removals take `_files` too
            if not present and reservation.total_charge == self.entry_bytes:  # evicted since it was reserved
                if self.total + self.reserved + size > self.total_quota:
                    raise QuotaExceeded(f"the relay holds {self.total + self.reserved} bytes; {size} more would "
                                        f"pass its bound of {self.total_quota}")
        blob = self.blobs.path(digest)
        if not present:
            make_directories(blob.parent)
            install(incoming.path, blob)
        try:
            write_atomically(entry_path(self.root, task_id, worker, digest), str(size).encode())
        except BaseException:
            if not present:
                blob.unlink(missing_ok=True)
            raise
        with self._index:
            record = self.records[(task_id, worker)]
            record.blobs[digest] = size
            record.used += size + self.entry_bytes
            self.total += (0 if present else size) + self.entry_bytes
            self.references[digest] += 1
            self._release(reservation)
        return True

    def add(self, task_id: int, worker: str, data: bytes, digest: str) -> bool:
        """`reserve`, `receive` and `commit` at once, for bytes already in memory."""
        reservation = self.reserve(task_id, worker, digest, len(data))
        if reservation is None:
            return False
        try:
            incoming = self.receive()
        except BaseException:
            self.release(reservation)
            raise
        incoming.write(data)
        return self.commit(reservation, incoming)

    def set_listing(self, task_id: int, worker: str, round_index: int, hashes: list[str]) -> bytes:
        """Record `worker`'s checkpoint listing of a round (each checkpoint one it pushed for the task), charged;
        returns the listing's document."""
        if not isinstance(hashes, list) or not 0 < len(hashes) <= self.max_listing_entries:
            raise BlobRejected(f"checkpoint_hashes must be a list of 1 to {self.max_listing_entries} hashes")
        for digest in hashes:
            check_blob_hash(digest)
        document = listing_document(hashes)
        path = listing_path(self.root, task_id, worker, round_index)
        with self._files:
            with self._index:
                record = self.records.get((task_id, worker)) or Record()
                missing = next((d for d in hashes if d not in record.blobs), None)
                if missing is not None:
                    raise BlobNotFound(f"checkpoint {missing} was not pushed by {worker} for task {task_id}")
                old = record.listings.get(round_index)
                charge = len(document) + (self.entry_bytes if old is None else -old)
                self._check_room(record, task_id, worker, charge, charge)
                record.reserved += charge
                self.reserved += charge
            try:
                write_atomically(path, document)
            finally:
                with self._index:
                    record.reserved -= charge
                    self.reserved -= charge
            with self._index:
                record.listings[round_index] = len(document)
                record.used += charge
                self.total += charge
        return document

    def listing(self, task_id: int, worker: str, round_index: int) -> bytes:
        """The document of `worker`'s listing of a round (bounded: `max_listing_entries` hashes);
        `BlobNotFound` when it set none."""
        path = listing_path(self.root, task_id, worker, round_index)
        with self._index:
            record = self.records.get((task_id, worker))
            listed = record is not None and round_index in record.listings
        try:
            if listed:
                return path.read_bytes()
        except FileNotFoundError:
            pass  # evicted meanwhile
        raise BlobNotFound(f"no checkpoints of {worker} recorded for task {task_id} round {round_index}")

    def evict_task(self, task_id: int) -> int:
        """Forget `task_id`: its records, and the blobs no other task's record names. Returns the bytes freed."""
        with self._files:
            with self._index:
                freed, unnamed = 0, []
                for key in [key for key in self.records if key[0] == task_id]:
                    record = self.records[key]
                    freed += record.used - sum(record.blobs.values())
                    for digest, size in record.blobs.items():
                        self.references[digest] -= 1
                        if not self.references[digest]:
                            del self.references[digest]
                            freed += size
                            unnamed.append(digest)
                    self.records[key] = Record(reserved=record.reserved)  # pushes still being read
                    if self.records[key].empty:
                        del self.records[key]
                self.total -= freed
            shutil.rmtree(self.root / "tasks" / str(task_id), ignore_errors=True)
            for digest in unnamed:
                self.blobs.path(digest).unlink(missing_ok=True)
        return freed
