"""The node's state store: LevelDB (plyvel) holding state values, the Merkle tree's nodes and commit metadata.

The app hash is the root of the sparse Merkle tree of `trolly.chain.sparse_merkle` over every state (key, value).
Only the latest version of the tree is kept: tree nodes are stored by path (`trolly.chain.sparse_merkle_nodes`), and
nodes made stale by a block are deleted in the same write batch that adds the new ones. Older heights of the state
values stay readable for `keep_recent` heights through an undo log (`trolly.abci_app.store_history`), pruned in
the same batch as each commit; `reader_at(height)` reads them.

Layout (one-byte prefixes, so the three kinds never mix and each iterates on its own):

    b"s" + state key     -> state value
    b"t" + node path     -> tree node record (path = the node's nibbles from the root as ASCII hex digits,
                            so the root is b"t" and its slot-10 child b"ta"; see trolly.chain.sparse_merkle_nodes)
    b"m" + b"height"     -> last committed height, u64 big-endian
    b"m" + b"app_hash"   -> root after that height (32 bytes)
    b"m" + b"layout"     -> b"trolly-store/1", the version of this layout

The crash contract (docs/architecture.md section 2): `prepare` (FinalizeBlock) computes the new root from the committed
tree plus the block's changes and writes nothing; `commit` (Commit) writes state changes, tree nodes and
(height, app hash) in ONE LevelDB `WriteBatch`, which LevelDB applies all or nothing, even across a crash.
A process killed between the two reopens at the previous height and hash exactly, and CometBFT re-sends the
block. Commits are written with `sync=True` by default: one fsync per block, so that `Info` after a power
loss never reports a height whose state the disk does not hold. (`sync=False` would still be atomic and
survive a killed process, since the write reaches the OS before `commit` returns; it only risks losing the
last blocks to a machine crash, which the handshake would replay. Benchmarks report which one they ran.)

Concurrency: one process per database. LevelDB locks its directory, so a second process (a CLI, another
node) cannot open it while the node runs; `Store` turns that into a `StoreLocked` error instead of trying.
A second `Store` on the same directory in the same process is refused the same way, before LevelDB is
asked (LevelDB's own in-process refusal closes a descriptor of its LOCK file, which silently drops the
process's POSIX lock and would let another process open the database alongside).
Inside the process, `reader()`, `snapshot()` and `prove()` may be used from any thread while the consensus
path prepares and commits: a lock orders commits against proofs, and a snapshot reads one commit's state.
The live reader keeps recently read and committed state values in memory (`DEFAULT_CACHE_VALUES`); `commit`
updates them with the block's write set under the same lock, so the cache never shows an older commit.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Iterator

import plyvel

from trolly.chain.ics23_proofs import ProofUnavailable, prove_key
from trolly.chain.sparse_merkle import EMPTY_ROOT
from trolly.chain.sparse_merkle_nodes import TreeUpdate, check_record, node_hash, update_tree

from . import store_history as history
from .errors import AbciAppError

STATE_PREFIX = b"s"
TREE_PREFIX = b"t"
META_PREFIX = b"m"
HEIGHT_KEY = META_PREFIX + b"height"
APP_HASH_KEY = META_PREFIX + b"app_hash"
LAYOUT_KEY = META_PREFIX + b"layout"
LAYOUT_VERSION = b"trolly-store/1"
"""Names this layout (prefixes, hex node paths, node records); written with the first commit and checked on
open, so a database from an incompatible version is refused with a clear message instead of misread."""

DEFAULT_CACHE_NODES = 250_000
"""How many committed tree node records stay in memory (about 60 MB at most: an internal record is 513
bytes, a leaf 65). Every block rewrites the upper levels and each transaction reads the leaves of its
accounts; without the cache each would be a LevelDB read per block. With up to ~180,000 keys the whole tree
fits; beyond that the least recently written or read-in records are dropped first."""


DEFAULT_CACHE_VALUES = 100_000
"""How many committed state values (an account is 16 bytes) the live reader keeps in memory, absent keys
included. Each transaction's signer is read once by CheckTx, the re-check, PrepareProposal and FinalizeBlock,
each over a fresh overlay of committed state: with the cache only the first is a LevelDB read. Beyond the
bound the least recently read-in or committed values are dropped first."""

DEFAULT_COMPACT_EVERY = 1000
"""Every this many commits the store asks LevelDB to compact the undo log's key range, on a thread of its own.
LevelDB frees a deleted record's bytes only when it compacts the file holding it, and it writes every commit to
its log file until the 32 MB memtable fills: without this, a pruned node's application.db grows on disk for
thousands of blocks though its contents stay bounded. A compaction first flushes the memtable (a fresh log),
then rewrites the range without the pruned records (docs/operations.md "Pruning" gives the figures)."""

_COMPACT_START = history.HISTORY_PREFIX
_COMPACT_STOP = b"q"
"""The range compacted: the undo log's b"h" records, the b"m" metadata and the b"p" index of changed keys."""


class StoreError(AbciAppError):
    """A store operation that cannot be done (bad arguments, stale pending commit, corrupt database)."""


class StoreLocked(StoreError):
    """Another process holds the database (LevelDB allows one process per directory)."""


class HeightPruned(StoreError):
    """A read at a height the store no longer keeps (or has not reached); the message names what it keeps."""


class StoreReader:
    """Committed state values: `get(key)` and ascending `iterate(prefix)`; a `trolly.chain.state.KVReader`.

    On the live database it always shows the latest commit (an iteration already started keeps showing the
    commit it started on: LevelDB iterators read from an implicit snapshot).
    """

    def __init__(self, source: "plyvel.DB | plyvel.Snapshot") -> None:
        self._source = source

    def get(self, key: bytes) -> bytes | None:
        return self._source.get(STATE_PREFIX + key)

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._source.iterator(prefix=STATE_PREFIX + prefix) as items:
            for key, value in items:
                yield key[1:], value


class _CachedStoreReader(StoreReader):
    """The live reader behind the committed-values cache: a miss reads LevelDB and fills the cache under the
    store's lock, which `Store.commit` holds while it writes and updates the cache, so no value read before a
    commit is put in the cache after it."""

    def __init__(self, db: "plyvel.DB", cache: "_ValueCache", lock: threading.RLock) -> None:
        super().__init__(db)
        self._values = cache.values
        self._cache = cache
        self._lock = lock

    def get(self, key: bytes) -> bytes | None:
        value = self._values.get(key, _UNCACHED)
        if value is _UNCACHED:
            with self._lock:
                value = self._source.get(STATE_PREFIX + key)
                self._cache.remember(key, value)
        return value


class StoreSnapshot(StoreReader):
    """Committed state frozen at one commit, `height` with root `app_hash`, whatever commits follow."""

    def __init__(self, snapshot: "plyvel.Snapshot", height: int, app_hash: bytes) -> None:
        super().__init__(snapshot)
        self.height = height
        self.app_hash = app_hash


@dataclass(frozen=True)
class PendingCommit:
    """A prepared block: its new app hash and everything `commit` will write. Holding one changes nothing."""

    height: int
    app_hash: bytes
    base_height: int
    base_app_hash: bytes
    changes: dict[bytes, bytes | None]
    tree: TreeUpdate
    store_token: object  # identifies the Store that prepared it


@dataclass(frozen=True)
class ProvenValue:
    """A committed value (None when absent) with its ICS23 proof against `app_hash`, the root after `height`:
    `proof_type` is the ABCI ProofOp type that names the proof's spec (`trolly.chain.ics23_proofs`), `proof`
    the CommitmentProof bytes."""

    height: int
    app_hash: bytes
    value: bytes | None
    proof_type: str
    proof: bytes


def _drop_oldest(entries: dict, capacity: int) -> None:
    """Drop a bounded cache's first-inserted entries down to 90 % of `capacity` at once, so that a full cache
    does not evict on every insert."""
    excess = len(entries) - capacity * 9 // 10
    for key in list(itertools.islice(entries, excess)):
        del entries[key]


class _NodeCache:
    """Committed node records by path, bounded by count. Oldest first out, where committing a record or
    reading it from disk makes it newest: the upper levels, rewritten every block, never leave."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: dict[str, bytes | None] = {}

    def remember(self, path: str, record: bytes | None) -> None:
        if self.capacity > 0:
            self.records[path] = record
            if len(self.records) > self.capacity:
                self._evict()

    def committed(self, tree: TreeUpdate) -> None:
        records = self.records
        for path in tree.deletes:
            records.pop(path, None)
        if self.capacity > 0:
            for path, record in tree.writes.items():
                records.pop(path, None)  # re-inserting moves it to the young end
                records[path] = record
            if len(records) > self.capacity:
                self._evict()

    def _evict(self) -> None:
        _drop_oldest(self.records, self.capacity)


class _ValueCache:
    """Committed state values by key (None: absent), bounded by count, first cached first out. `committed`
    applies a block's write set, so the cache always equals the last commit for every key it holds."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.values: dict[bytes, bytes | None] = {}

    def remember(self, key: bytes, value: bytes | None) -> None:
        if self.capacity > 0 and type(key) is bytes:
            self.values[key] = value
            if len(self.values) > self.capacity:
                self._evict()

    def committed(self, changes: dict[bytes, bytes | None]) -> None:
        if self.capacity > 0:
            self.values.update(changes)  # in place: a key keeps its age (no reordering: this runs every block)
            if len(self.values) > self.capacity:
                self._evict()
        else:
            self.values.clear()

    def _evict(self) -> None:
        _drop_oldest(self.values, self.capacity)


class _NodeReader:
    """The committed tree for `update_tree`/`prove_key`: LevelDB reads behind the node cache."""

    def __init__(self, source: "plyvel.DB | plyvel.Snapshot", cache: _NodeCache) -> None:
        self._source_get = source.get
        self._cache = cache
        self._records = cache.records

    def get_node(self, path: str) -> bytes | None:
        record = self._records.get(path, _UNCACHED)
        if record is _UNCACHED:
            record = self._source_get(TREE_PREFIX + path.encode())
            if record is not None:
                try:
                    check_record(record)
                except ValueError as exc:
                    raise StoreError(f"tree node at path {path!r}: {exc}; the database is corrupt") from None
            self._cache.remember(path, record)
        return record


_UNCACHED = object()
_OPEN_PATHS: set[str] = set()  # databases this process has open (real paths)
_OPEN_PATHS_LOCK = threading.Lock()


class Store:
    """LevelDB via plyvel, committed with a history-independent 16-ary sparse Merkle tree (see module doc)."""

    def __init__(self, path: str | os.PathLike, *, sync: bool = True, cache_nodes: int = DEFAULT_CACHE_NODES,
                 cache_values: int = DEFAULT_CACHE_VALUES, keep_recent: int = 1,
                 compact_every: int = DEFAULT_COMPACT_EVERY) -> None:
        """`keep_recent`: how many recent heights stay readable (`reader_at`); 1 keeps only the latest and
        writes no undo log (`trolly.abci_app.store_history`). `compact_every`: commits between two background
        compactions of the pruned range (0: never, LevelDB compacts only when its own thresholds say)."""
        if not isinstance(keep_recent, int) or keep_recent < 1:
            raise StoreError(f"keep_recent must be a positive integer, got {keep_recent!r}")
        if not isinstance(compact_every, int) or compact_every < 0:
            raise StoreError(f"compact_every must be a non-negative integer, got {compact_every!r}")
        self.keep_recent = keep_recent
        self.compact_every = compact_every
        self._commits_since_compaction = 0
        self._compaction: threading.Thread | None = None
        self.on_pruned: Callable[[float], None] | None = None
        """Told the seconds each commit spent finding the undo records it deletes (the app's prune metric)."""
        self.path = os.path.realpath(os.fspath(path))
        with _OPEN_PATHS_LOCK:
            # Checked before LevelDB sees the path: a second in-process open makes LevelDB open and close its
            # LOCK file, and closing any descriptor of a file drops the process's POSIX lock on it, which
            # would let another process in.
            if self.path in _OPEN_PATHS:
                raise StoreLocked(f"{path}: the database is already open in this process")
            try:
                # A 32 MB memtable (LevelDB's default is 4 MB) holds several blocks of tree nodes before a flush,
                # so that a commit rarely waits for one; reads go through 64 MB of block cache.
                self._db = plyvel.DB(self.path, create_if_missing=True, write_buffer_size=32 << 20,
                                     lru_cache_size=64 << 20, bloom_filter_bits=10)
            except plyvel.IOError as exc:
                if "lock" in str(exc).lower():
                    raise StoreLocked(f"{path}: the database is open in another process ({exc})") from None
                raise StoreError(f"{path}: cannot open the database: {exc}") from None
            _OPEN_PATHS.add(self.path)
        self.sync = sync
        self._cache = _NodeCache(cache_nodes)
        self._values = _ValueCache(cache_values)
        self._lock = threading.RLock()
        self._closed = False
        self._token = object()
        try:
            self._load_metadata()
        except StoreError:
            self.close()
            raise

    def _load_metadata(self) -> None:
        """Read (height, app hash), refusing another layout or a tree whose root does not match them."""
        layout = self._db.get(LAYOUT_KEY)
        if layout != LAYOUT_VERSION and (layout is not None or self._db.get(HEIGHT_KEY) is not None):
            found = "an older unversioned layout" if layout is None else f"layout {layout.decode(errors='replace')!r}"
            raise StoreError(f"{self.path}: the database uses {found}, this version reads "
                             f"{LAYOUT_VERSION.decode()!r}; move it aside and let the node replay from genesis")
        height_raw = self._db.get(HEIGHT_KEY)
        self.last_height: int = 0 if height_raw is None else int.from_bytes(height_raw, "big")
        self.last_app_hash: bytes = self._db.get(APP_HASH_KEY) or EMPTY_ROOT
        oldest_raw = self._db.get(history.OLDEST_KEY)
        self.oldest_height: int = self.last_height if oldest_raw is None else int.from_bytes(oldest_raw, "big")
        """The oldest height `reader_at` can read (the last height when no undo log is kept)."""
        root = self._nodes().get_node("")
        tree_root = EMPTY_ROOT if root is None else node_hash(root)
        if tree_root != self.last_app_hash:
            raise StoreError(f"{self.path}: stored app hash {self.last_app_hash.hex()} does not match the tree root "
                             f"{tree_root.hex()}; the database is corrupt")

    # -- reading -------------------------------------------------------------------------------------------
    def reader(self) -> StoreReader:
        """Committed state, always the latest commit (pass it to `trolly.chain.state.State`); reads go through
        the cache of committed values."""
        self._check_open()
        return _CachedStoreReader(self._db, self._values, self._lock)

    def snapshot(self) -> StoreSnapshot:
        """Committed state frozen at the current commit, whatever commits follow (`.height`, `.app_hash`)."""
        with self._lock:
            self._check_open()
            return StoreSnapshot(self._db.snapshot(), self.last_height, self.last_app_hash)

    def reader_at(self, height: int) -> StoreReader | history.HistoricReader:
        """Committed state as block `height` left it: the live reader for the last height, the undo log for
        an older one the store still keeps; `HeightPruned`, naming the heights kept, for any other."""
        with self._lock:
            self._check_open()
            if height == self.last_height:
                return self.reader()
            if not self.oldest_height <= height < self.last_height:
                raise HeightPruned(self.describe_unreadable(height))
            return history.HistoricReader(self._db.snapshot(), STATE_PREFIX, height)

    def describe_unreadable(self, height: int) -> str:
        """Why `height` cannot be read: not committed yet, or pruned (naming the oldest height kept)."""
        if height > self.last_height:
            return f"height {height} is not committed yet (the last committed height is {self.last_height})"
        return (f"height {height} is pruned: this node keeps heights {self.oldest_height} to {self.last_height} "
                f"(the oldest height kept is {self.oldest_height})")

    def holding_commits(self) -> threading.RLock:
        """The store's lock, to hold (`with`) while several reads and proofs must see one commit: no commit
        happens while it is held."""
        return self._lock

    def prove(self, key: bytes) -> ProvenValue:
        """The value at the last commit with its ICS23 proof, membership if present, non-membership if absent,
        and the height and app hash the proof is against (taken atomically)."""
        _check_key(key)
        with self._lock:
            self._check_open()
            value = self._db.get(STATE_PREFIX + key)
            try:
                proof_type, proof = prove_key(self._nodes(), key, value)
            except ProofUnavailable as exc:
                raise StoreError(f"cannot prove {key!r}: {exc}; the database is corrupt") from None
            return ProvenValue(self.last_height, self.last_app_hash, value, proof_type, proof)

    # -- writing -------------------------------------------------------------------------------------------
    def prepare(self, changes: dict[bytes, bytes | None], height: int) -> PendingCommit:
        """The new root over the committed tree plus `changes` (None deletes). Writes nothing."""
        if not isinstance(height, int) or isinstance(height, bool) or height < 0:
            raise StoreError(f"height must be a non-negative integer, got {height!r}")
        sha256 = hashlib.sha256  # key_hash and value_hash of trolly.chain.sparse_merkle, inlined: this loop is hot
        hashed = []
        for key, value in changes.items():
            if type(key) is not bytes or not key:
                _check_key(key)
            if value is None:
                hashed.append((sha256(key).digest(), None))
            elif type(value) is bytes:
                hashed.append((sha256(key).digest(), sha256(value).digest()))
            else:
                raise StoreError(f"value of {key!r} must be bytes or None, got {type(value).__name__}")
        with self._lock:
            self._check_open()
            if height <= self.last_height and not (height == 0 == self.last_height):
                raise StoreError(f"cannot prepare height {height}: height {self.last_height} is already committed")
            tree = update_tree(self._nodes(), hashed)
            return PendingCommit(height, tree.root_hash, self.last_height, self.last_app_hash, dict(changes), tree,
                                 self._token)

    def commit(self, pending: PendingCommit) -> None:
        """Write the prepared block in one atomic batch; refuses one prepared against an older commit."""
        with self._lock:
            self._check_open()
            if pending.store_token is not self._token:
                raise StoreError("this pending commit was prepared by another store")
            if (pending.base_height, pending.base_app_hash) != (self.last_height, self.last_app_hash):
                raise StoreError(
                    f"pending commit for height {pending.height} was prepared against height {pending.base_height} "
                    f"({pending.base_app_hash.hex()[:16]}), but height {self.last_height} "
                    f"({self.last_app_hash.hex()[:16]}) is committed now"
                )
            with self._db.write_batch(sync=self.sync) as batch:
                oldest = self._write_history(batch, pending)
                for key, value in pending.changes.items():
                    if value is None:
                        batch.delete(STATE_PREFIX + key)
                    else:
                        batch.put(STATE_PREFIX + key, value)
                for path in pending.tree.deletes:
                    batch.delete(TREE_PREFIX + path.encode())
                for path, record in pending.tree.writes.items():
                    batch.put(TREE_PREFIX + path.encode(), record)
                batch.put(HEIGHT_KEY, pending.height.to_bytes(8, "big"))
                batch.put(LAYOUT_KEY, LAYOUT_VERSION)
                batch.put(APP_HASH_KEY, pending.app_hash)
            self.last_height = pending.height
            self.last_app_hash = pending.app_hash
            self.oldest_height = oldest
            self._cache.committed(pending.tree)
            self._values.committed(pending.changes)
            self._commits_since_compaction += 1
            if self.compact_every and self._commits_since_compaction >= self.compact_every:
                self._start_compaction()

    def _start_compaction(self) -> None:
        """Compact the pruned range on a background thread, off the block path; one at a time (a commit that
        finds one still running leaves it be and tries again at the next commit)."""
        if self._compaction is not None and self._compaction.is_alive():
            return
        self._commits_since_compaction = 0
        self._compaction = threading.Thread(target=self._compact, name="store-compaction", daemon=True)
        self._compaction.start()

    def _compact(self) -> None:
        self._db.compact_range(start=_COMPACT_START, stop=_COMPACT_STOP)

    def wait_for_compaction(self) -> None:
        """Return once no background compaction runs (close calls it; tests measure the disk after it)."""
        if self._compaction is not None:
            self._compaction.join()

    def _write_history(self, batch, pending: PendingCommit) -> int:
        """Add the block's undo records and delete those of heights that fall out of `keep_recent` (one batch
        with the commit); returns the oldest readable height after it. Genesis and block 1 are committed
        together, so block 1 records nothing: no older height is readable."""
        keeping = self.keep_recent > 1 and self.last_height > 0
        if keeping:
            read = self._values.values.get
            history.record_changes(batch.put, lambda key: _cached_or(read, self._db, key), pending.changes,
                                   pending.height)
            oldest = max(self.oldest_height, pending.height - self.keep_recent + 1)
        else:
            oldest = pending.height
        if self.oldest_height < min(oldest, self.last_height):  # records of heights no longer readable
            started = time.monotonic()
            history.prune_heights(self._db, batch.delete, self.oldest_height + 1, min(oldest, self.last_height))
            if self.on_pruned is not None:
                self.on_pruned(time.monotonic() - started)
        if keeping or self.oldest_height < self.last_height:
            batch.put(history.OLDEST_KEY, history.height_bytes(oldest))
        return oldest

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.wait_for_compaction()
                self._cache.records.clear()
                self._values.values.clear()
                self._db.close()
                with _OPEN_PATHS_LOCK:
                    _OPEN_PATHS.discard(self.path)

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------
    def _nodes(self) -> _NodeReader:
        return _NodeReader(self._db, self._cache)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")


def _cached_or(read_cache, db: "plyvel.DB", key: bytes) -> bytes | None:
    """A committed value, from the value cache when it holds the key, else from LevelDB."""
    value = read_cache(key, _UNCACHED)
    return db.get(STATE_PREFIX + key) if value is _UNCACHED else value


def _check_key(key: object) -> None:
    if not isinstance(key, bytes) or not key:
        raise StoreError(f"state keys are non-empty bytes, got {key!r}")


