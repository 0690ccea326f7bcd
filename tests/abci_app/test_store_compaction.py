"""Compaction: a pruned store's files on disk level off over thousands of blocks, because the store compacts the
undo log's key range every `compact_every` commits on a background thread; without it LevelDB keeps every
commit in its log file until the 32 MB memtable fills, and the deleted records' bytes with it."""

from __future__ import annotations

import os

import pytest

from trolly.abci_app.store import Store, StoreError

BLOCKS = 4000


def disk_bytes(path) -> int:
    """What application.db takes on disk: the sum of its files."""
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def commit_small_blocks(path, compact_every: int) -> dict[int, int]:
    """Commit BLOCKS blocks of bounded state (50 accounts rewritten, one task added and an older one deleted per
    block) with the last 100 heights kept; the disk bytes every 500 blocks."""
    sizes = {}
    store = Store(path, sync=False, keep_recent=100, compact_every=compact_every)
    try:
        for height in range(1, BLOCKS + 1):
            changes = {b"acct/%d" % (height % 50): height.to_bytes(8, "big") * 8,
                       b"task/%d" % height: bytes([height % 251]) * 200, b"task/%d" % (height - 3): None}
            store.commit(store.prepare(changes, height))
            if height % 500 == 0:
                store.wait_for_compaction()
                sizes[height] = disk_bytes(path)
        assert store.oldest_height == BLOCKS - 99
    finally:
        store.close()
    return sizes


def test_a_pruned_store_stays_bounded_on_disk_only_with_compaction(tmp_path):
    """Disk growth of a pruned node: with compaction every 300 commits (so that the samples fall between two
    compactions, log included) the size at 4,000 blocks is within 1.5x of the size at 2,000; with none the
    same blocks keep growing the log, to many times the compacted size."""
    compacted = commit_small_blocks(tmp_path / "compacted", compact_every=300)
    uncompacted = commit_small_blocks(tmp_path / "uncompacted", compact_every=0)
    print(f"disk bytes by height, compacted every 300: {compacted}; never compacted: {uncompacted}")
    assert max(compacted[h] for h in compacted if h > 2000) <= 1.5 * max(compacted[h] for h in compacted if h <= 2000)
    assert uncompacted[4000] >= 1.8 * uncompacted[2000]  # grows with every block
    assert uncompacted[4000] >= 10 * compacted[4000]


def test_compact_every_must_be_a_non_negative_integer(tmp_path):
    with pytest.raises(StoreError, match="compact_every must be a non-negative integer"):
        Store(tmp_path / "db", compact_every=-1)
