"""Build a store from a stream of (key, value) pairs: how a state-synced node gets its state.

`StoreImport(path)` writes into a fresh LevelDB directory: the values under the store's state prefix and the
Merkle tree over them, batch by batch as the pairs come (so a state larger than memory can be imported); then
`finish(height)` writes the commit metadata and returns the tree's root. Until `finish` the directory holds no
height, so a crash part-way leaves a directory that `Store` refuses to open (its tree has no matching app
hash); the restore (`snapshot_restore`) builds in a scratch directory and moves it into place only after the
root equals the app hash it trusts.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import plyvel

from trolly.chain.sparse_merkle import EMPTY_ROOT
from trolly.chain.sparse_merkle_nodes import node_hash, update_tree

from . import store_history as history
from .store import APP_HASH_KEY, HEIGHT_KEY, LAYOUT_KEY, LAYOUT_VERSION, STATE_PREFIX, TREE_PREFIX, StoreError

IMPORT_BATCH = 20_000
"""Pairs hashed into the tree per batch: bounds the memory of one batch's new tree nodes."""


class _DbNodes:
    def __init__(self, db: "plyvel.DB") -> None:
        self._get = db.get

    def get_node(self, path: str) -> bytes | None:
        return self._get(TREE_PREFIX + path.encode())


class StoreImport:
    """A fresh store being filled; `add` pairs (each key once), then `finish` or `abandon`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        if os.path.exists(self.path):
            shutil.rmtree(self.path)
        self._db = plyvel.DB(self.path, create_if_missing=True, error_if_exists=True)
        self._pending: list[tuple[bytes, bytes]] = []
        self.entries = 0

    def add(self, key: bytes, value: bytes) -> None:
        self._pending.append((key, value))
        self.entries += 1
        if len(self._pending) >= IMPORT_BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        sha256 = hashlib.sha256
        tree = update_tree(_DbNodes(self._db), [(sha256(k).digest(), sha256(v).digest()) for k, v in self._pending])
        with self._db.write_batch() as batch:
            for key, value in self._pending:
                batch.put(STATE_PREFIX + key, value)
            for path in tree.deletes:
                batch.delete(TREE_PREFIX + path.encode())
            for path, record in tree.writes.items():
                batch.put(TREE_PREFIX + path.encode(), record)
        self._pending = []

    def finish(self, height: int) -> bytes:
        """Write the last batch and the metadata of a commit at `height`, close; returns the tree's root."""
        self._flush()
        root_record = self._db.get(TREE_PREFIX)
        root = EMPTY_ROOT if root_record is None else node_hash(root_record)
        with self._db.write_batch(sync=True) as batch:
            batch.put(HEIGHT_KEY, height.to_bytes(8, "big"))
            batch.put(APP_HASH_KEY, root)
            batch.put(LAYOUT_KEY, LAYOUT_VERSION)
            batch.put(history.OLDEST_KEY, history.height_bytes(height))
        self._db.close()
        return root

    def abandon(self) -> None:
        """Close and delete the directory: nothing of a failed import stays."""
        if not self._db.closed:
            self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)


def replace_directory(target: str | os.PathLike, replacement: str | os.PathLike) -> None:
    """Move `replacement` onto `target`: the old directory is renamed aside first and deleted after, so a crash
    leaves either the old store or the new one in place, never a mixture."""
    target, replacement = os.fspath(target), os.fspath(replacement)
    aside = target + ".replaced"
    if os.path.exists(aside):
        shutil.rmtree(aside)
    if os.path.exists(target):
        os.rename(target, aside)
    try:
        os.rename(replacement, target)
    except OSError as exc:
        if os.path.exists(aside):
            os.rename(aside, target)
        raise StoreError(f"cannot move the restored store into {target}: {exc}") from None
    shutil.rmtree(aside, ignore_errors=True)
