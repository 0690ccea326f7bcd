"""The live reader's cache of committed state values (`Store(cache_values=...)`): a speed-up only. Reads through
it always equal LevelDB's committed contents, whatever was read, written, deleted or evicted before."""

import random

import plyvel
import pytest

from trolly.abci_app.store import Store


def committed_contents(store: Store) -> dict[bytes, bytes]:
    return dict(store.reader().iterate(b""))  # iteration goes to LevelDB, never through the cache


def commit(store: Store, changes: dict[bytes, bytes | None], height: int) -> None:
    store.commit(store.prepare(changes, height))


@pytest.mark.parametrize("capacity", [0, 3, 1000])
def test_cached_reads_equal_the_committed_values_over_random_blocks(tmp_path, capacity):
    rng = random.Random(capacity)
    keys = [b"\x01" + bytes([index]) for index in range(40)]
    with Store(tmp_path / "db", sync=False, cache_values=capacity) as store:
        for height in range(1, 25):
            reader = store.reader()
            before = {key: reader.get(key) for key in rng.sample(keys, 15)}  # fills the cache, absent keys too
            changes = {key: None if rng.random() < 0.3 else rng.randbytes(rng.randrange(1, 9))
                       for key in rng.sample(keys, 10)}
            assert all(value == store.reader().get(key) for key, value in before.items())
            commit(store, changes, height)
            contents = committed_contents(store)
            assert {key: store.reader().get(key) for key in keys} == {key: contents.get(key) for key in keys}
            assert len(store._values.values) <= capacity


def test_a_value_read_before_a_commit_is_not_shown_after_it(tmp_path):
    with Store(tmp_path / "db", sync=False) as store:
        commit(store, {b"\x01a": b"old", b"\x01b": b"gone"}, 1)
        reader = store.reader()
        assert (reader.get(b"\x01a"), reader.get(b"\x01b"), reader.get(b"\x01c")) == (b"old", b"gone", None)
        commit(store, {b"\x01a": b"new", b"\x01b": None, b"\x01c": b"born"}, 2)
        assert (reader.get(b"\x01a"), reader.get(b"\x01b"), reader.get(b"\x01c")) == (b"new", None, b"born")


def test_a_snapshot_reads_its_own_commit_not_the_cache(tmp_path):
    with Store(tmp_path / "db", sync=False) as store:
        commit(store, {b"\x01a": b"one"}, 1)
        frozen = store.snapshot()
        commit(store, {b"\x01a": b"two"}, 2)
        assert store.reader().get(b"\x01a") == b"two" and frozen.get(b"\x01a") == b"one"


def test_a_failed_commit_leaves_the_cache_showing_the_last_commit(tmp_path):
    with Store(tmp_path / "db", sync=False) as store:
        commit(store, {b"\x01a": b"one"}, 1)
        stale = store.prepare({b"\x01a": b"two"}, 2)
        commit(store, {b"\x01a": b"three"}, 2)
        with pytest.raises(Exception, match="prepared against height 1"):
            store.commit(stale)
        assert store.reader().get(b"\x01a") == b"three"


def test_the_cache_is_empty_after_close_and_a_reopened_store_reads_the_disk(tmp_path):
    store = Store(tmp_path / "db", sync=False)
    commit(store, {b"\x01a": b"one"}, 1)
    assert store.reader().get(b"\x01a") == b"one"
    store.close()
    assert store._values.values == {}
    db = plyvel.DB(str(tmp_path / "db"))
    db.put(b"s\x01a", b"edited on disk")
    db.close()
    with Store(tmp_path / "db", sync=False) as reopened:
        assert reopened.reader().get(b"\x01a") == b"edited on disk"
