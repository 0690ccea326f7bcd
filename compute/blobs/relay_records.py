"""Where a blob relay keeps who pushed what, and how it reads that back when it starts.

    <root>/tasks/<task id>/<worker>/blobs/<hex>         an entry: the blob's size in bytes, in decimal
    <root>/tasks/<task id>/<worker>/rounds/<r>.json     the round's listing, {"checkpoint_hashes": [...]}

The bytes themselves are in `<root>/blobs` (one copy however many records name them). No file here grows with
the number of pushes: a push writes one small entry, a listing GET reads one listing of bounded length, and no
request reads or parses a whole record. What the relay needs to decide a push (what a worker holds, how many
bytes) it keeps in memory, one `Record` per task and worker, read from these files once at start
(`load_records`). Every name is read strictly (`path_names`) before a path is built from it, and the path
checked to stay under the root.

A relay home of the first layout (one JSON record per worker, `<root>/tasks/<task>/<worker>.json`) is moved to
this one when the relay starts (`adopt_first_layout`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib

from trolly.wallet.files import TEMPORARY_SUFFIX, write_atomically

from .errors import BlobError
from .path_names import inside, unsigned_id, worker_address
from .store import check_blob_hash

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Record:
    """What one worker holds for one task, in memory: the blobs it pushed and the listings it set."""

    blobs: dict[str, int] = dataclasses.field(default_factory=dict)
    """Each blob's hash and size."""
    listings: dict[int, int] = dataclasses.field(default_factory=dict)
    """Each listed round and the bytes of its listing's file."""
    used: int = 0
    """Bytes charged to the worker's quota for what is stored (`RelayStore.charge`)."""
    reserved: int = 0
    """Bytes charged for pushes accepted for reading and not yet stored (given back if they are refused)."""

    @property
    def entries(self) -> int:
        return len(self.blobs) + len(self.listings)

    @property
    def empty(self) -> bool:
        return not self.entries and not self.reserved


def record_directory(root: pathlib.Path, task_id: int, worker: str) -> pathlib.Path:
    if not isinstance(task_id, int) or isinstance(task_id, bool) or not 0 <= task_id < 2**64:
        raise ValueError(f"task id must be an unsigned 64-bit integer, got {task_id!r}")
    return inside(root / "tasks", root / "tasks" / str(task_id) / worker_address(worker))


def entry_path(root: pathlib.Path, task_id: int, worker: str, digest: str) -> pathlib.Path:
    return record_directory(root, task_id, worker) / "blobs" / check_blob_hash(digest)


def listing_path(root: pathlib.Path, task_id: int, worker: str, round_index: int) -> pathlib.Path:
    if not isinstance(round_index, int) or isinstance(round_index, bool) or not 0 <= round_index < 2**64:
        raise ValueError(f"round must be an unsigned 64-bit integer, got {round_index!r}")
    return record_directory(root, task_id, worker) / "rounds" / f"{round_index}.json"


def listing_document(hashes: list[str]) -> bytes:
    """The bytes a listing is kept and served as."""
    return json.dumps({"checkpoint_hashes": list(hashes)}, separators=(",", ":")).encode()


def load_records(root: pathlib.Path) -> dict[tuple[int, str], Record]:
    """Every record under `root` (entries and listing sizes; `used` left for the store to charge). Temporary
    files a crash left are removed; a name that is not a task id, an address, a hash or a round is skipped with
    a warning, and names nothing."""
    records: dict[tuple[int, str], Record] = {}
    tasks = root / "tasks"
    if not tasks.is_dir():
        return records
    adopt_first_layout(root)
    for task_directory in tasks.iterdir():
        for worker_directory in (task_directory.iterdir() if task_directory.is_dir() else ()):
            try:
                key = (unsigned_id(task_directory.name, "task id"), worker_address(worker_directory.name))
            except BlobError as error:
                log.warning("relay home: %s skipped (%s)", worker_directory, error)
                continue
            record = Record()
            for path in _files(worker_directory / "blobs"):
                record.blobs[check_blob_hash(path.name)] = int(path.read_text())
            for path in _files(worker_directory / "rounds"):
                record.listings[unsigned_id(path.name.removesuffix(".json"), "round")] = path.stat().st_size
            if record.entries:
                records[key] = record
    return records


def _files(directory: pathlib.Path):
    """The entries of `directory` (none if absent), temporaries of an interrupted write removed."""
    for path in (directory.iterdir() if directory.is_dir() else ()):
        if path.name.startswith(".") and path.name.endswith(TEMPORARY_SUFFIX):
            path.unlink(missing_ok=True)
            continue
        yield path


def adopt_first_layout(root: pathlib.Path) -> None:
    """Move each record of the first layout (`<root>/tasks/<task>/<worker>.json`, {"blobs": {hash: size},
    "listings": {round: [hash, ...]}}) to this one, then remove it."""
    for path in (root / "tasks").glob("*/*.json"):
        task_id, worker = unsigned_id(path.parent.name, "task id"), worker_address(path.stem)
        old = json.loads(path.read_bytes())
        for digest, size in old["blobs"].items():
            write_atomically(entry_path(root, task_id, worker, digest), str(int(size)).encode())
        for round_index, hashes in old["listings"].items():
            write_atomically(listing_path(root, task_id, worker, int(round_index)), listing_document(hashes))
        path.unlink()
        log.info("relay home: record %s moved to %s", path, record_directory(root, task_id, worker))
