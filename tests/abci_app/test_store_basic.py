"""The LevelDB store (`trolly.abci_app.store`): prepare writes nothing, commit is one batch, proofs verify."""

import random
import subprocess
import sys

import plyvel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trolly.abci_app.store import Store, StoreError, StoreLocked
from trolly.chain.sparse_merkle import EMPTY_ROOT, MemoryTree
from trolly.wallet.proofs import proof_holds
from trolly.chain.sparse_merkle_nodes import DictNodeSource, update_tree
from trolly.chain.sparse_merkle import key_hash, value_hash
from trolly.chain.state import State


def raw_contents(path) -> dict[bytes, bytes]:
    db = plyvel.DB(str(path))
    try:
        return dict(db.iterator())
    finally:
        db.close()


def random_block(rng: random.Random, key_space: int, size: int) -> dict[bytes, bytes | None]:
    changes = {}
    for _ in range(size):
        key = b"\x01" + rng.randrange(key_space).to_bytes(4, "big")
        changes[key] = None if rng.random() < 0.25 else rng.randbytes(rng.randrange(1, 20))
    return changes


def commit_block(store: Store, changes, height) -> bytes:
    pending = store.prepare(changes, height)
    store.commit(pending)
    return pending.app_hash


def test_a_new_store_is_at_height_zero_with_the_empty_root(tmp_path):
    with Store(tmp_path / "db") as store:
        assert (store.last_height, store.last_app_hash) == (0, EMPTY_ROOT)
        assert store.reader().get(b"x") is None


def test_app_hash_matches_the_reference_tree_over_random_blocks(tmp_path):
    rng = random.Random(7)
    reference = MemoryTree()
    with Store(tmp_path / "db", cache_nodes=50) as store:
        for height in range(1, 30):
            changes = random_block(rng, 400, rng.randrange(0, 60))
            app_hash = commit_block(store, changes, height)
            reference.apply(changes)
            assert app_hash == store.last_app_hash == reference.root()
            assert store.last_height == height
        assert dict(store.reader().iterate(b"")) == reference.items


def test_prepare_writes_nothing(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"a": b"1"}, 1)
    before = raw_contents(tmp_path / "db")
    with Store(tmp_path / "db") as store:
        pending = store.prepare({b"a": None, b"b": b"2"}, 2)
        assert pending.app_hash == MemoryTree({b"b": b"2"}).root()
        assert store.reader().get(b"a") == b"1" and store.reader().get(b"b") is None
        assert (store.last_height, store.last_app_hash) == (1, MemoryTree({b"a": b"1"}).root())
    assert raw_contents(tmp_path / "db") == before


def test_reopening_after_an_uncommitted_prepare_gives_the_last_commit(tmp_path):
    with Store(tmp_path / "db") as store:
        committed = commit_block(store, {b"a": b"1"}, 1)
        store.prepare({b"a": b"changed"}, 2)
    with Store(tmp_path / "db") as store:
        assert (store.last_height, store.last_app_hash) == (1, committed)
        assert store.reader().get(b"a") == b"1"


def test_commit_refuses_a_pending_prepared_against_an_older_commit(tmp_path):
    with Store(tmp_path / "db") as store:
        first = store.prepare({b"a": b"1"}, 1)
        second = store.prepare({b"b": b"2"}, 1)
        store.commit(first)
        with pytest.raises(StoreError, match="prepared against height 0"):
            store.commit(second)
        with pytest.raises(StoreError):
            store.commit(first)  # committing the same block twice is refused too
        assert store.reader().get(b"b") is None and store.last_height == 1


def test_the_same_block_prepared_twice_gives_the_same_hash(tmp_path):
    """FinalizeBlock re-run after a crash must be a pure function of (committed state, block)."""
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"k%d" % i: b"v" for i in range(100)}, 1)
        changes = {b"k3": None, b"new": b"x"}
        assert store.prepare(changes, 2).app_hash == store.prepare(changes, 2).app_hash


def test_commit_refuses_a_pending_from_another_store(tmp_path):
    with Store(tmp_path / "one") as one, Store(tmp_path / "two") as two:
        with pytest.raises(StoreError, match="another store"):
            two.commit(one.prepare({b"a": b"1"}, 1))


@pytest.mark.parametrize("changes, height", [
    ({b"a": b"1"}, 1),  # height already committed
    ({b"": b"1"}, 5),  # empty key
    ({"text": b"1"}, 5),  # key not bytes
    ({b"a": "text"}, 5),  # value not bytes
    ({b"a": b"1"}, -1),
])
def test_prepare_rejects_bad_input(tmp_path, changes, height):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"a": b"0"}, 1)
        with pytest.raises(StoreError):
            store.prepare(changes, height)


def test_genesis_may_commit_at_height_zero_and_heights_may_skip(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"genesis": b"1"}, 0)
        assert store.last_height == 0 and store.last_app_hash == MemoryTree({b"genesis": b"1"}).root()
        commit_block(store, {b"a": b"1"}, 5)  # CometBFT's initial_height may be above 1
        assert store.last_height == 5


def test_proofs_verify_against_the_committed_app_hash(tmp_path):
    rng = random.Random(3)
    with Store(tmp_path / "db") as store:
        reference = MemoryTree()
        for height in range(1, 6):
            changes = random_block(rng, 300, 80)
            commit_block(store, changes, height)
            reference.apply(changes)
        for index in range(300):
            key = b"\x01" + index.to_bytes(4, "big")
            proven = store.prove(key)
            assert proven.value == reference.items.get(key)
            assert proof_holds(reference.root(), key, proven.value, proven.proof_type, proven.proof)
        proven = store.prove(b"\x01" + bytes(4))
        assert (proven.height, proven.app_hash) == (5, store.last_app_hash)


def test_stored_nodes_are_exactly_a_fresh_build_no_stale_nodes(tmp_path):
    rng = random.Random(11)
    reference = MemoryTree()
    with Store(tmp_path / "db") as store:
        for height in range(1, 25):
            changes = random_block(rng, 200, 40)
            commit_block(store, changes, height)
            reference.apply(changes)
    fresh = DictNodeSource()
    fresh.apply(update_tree(fresh, [(key_hash(k), value_hash(v)) for k, v in reference.items.items()]))
    contents = raw_contents(tmp_path / "db")
    assert {k[1:].decode(): v for k, v in contents.items() if k[:1] == b"t"} == fresh.nodes
    assert {k[1:]: v for k, v in contents.items() if k[:1] == b"s"} == reference.items


def test_deleting_everything_leaves_only_metadata(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"k%d" % i: b"v" for i in range(500)}, 1)
        commit_block(store, {b"k%d" % i: None for i in range(500)}, 2)
        assert store.last_app_hash == EMPTY_ROOT
    assert {k[:1] for k in raw_contents(tmp_path / "db")} == {b"m"}
    assert set(raw_contents(tmp_path / "db")) == {b"mheight", b"mapp_hash", b"mlayout"}


def test_reader_iterates_a_prefix_in_ascending_order_and_works_under_state(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"\x01c": b"3", b"\x01a": b"1", b"\x02x": b"9", b"\x01b": b"2"}, 1)
        assert list(store.reader().iterate(b"\x01")) == [(b"\x01a", b"1"), (b"\x01b", b"2"), (b"\x01c", b"3")]
        state = State(store.reader())
        state.set(b"\x01bb", b"new")
        state.delete(b"\x01a")
        assert [k for k, _ in state.iterate(b"\x01")] == [b"\x01b", b"\x01bb", b"\x01c"]
        commit_block(store, state.changes(), 2)
        assert list(store.reader().iterate(b"\x01")) == [(b"\x01b", b"2"), (b"\x01bb", b"new"), (b"\x01c", b"3")]


def test_snapshot_keeps_showing_its_commit(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"a": b"1"}, 1)
        snapshot = store.snapshot()
        commit_block(store, {b"a": b"2"}, 2)
        assert snapshot.get(b"a") == b"1" and snapshot.height == 1
        assert store.reader().get(b"a") == b"2"


def test_reopen_restores_height_hash_and_values(tmp_path):
    rng = random.Random(5)
    with Store(tmp_path / "db") as store:
        for height in range(1, 8):
            commit_block(store, random_block(rng, 100, 30), height)
        expected = (store.last_height, store.last_app_hash, dict(store.reader().iterate(b"")))
    with Store(tmp_path / "db") as store:
        assert (store.last_height, store.last_app_hash, dict(store.reader().iterate(b""))) == expected
        commit_block(store, {b"more": b"x"}, 8)  # and keeps working from there


def test_a_second_opener_gets_store_locked(tmp_path):
    with Store(tmp_path / "db"):
        with pytest.raises(StoreLocked):
            Store(tmp_path / "db")
        child = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom trolly.abci_app.store import Store, StoreLocked\n"
             "try:\n    Store(sys.argv[1])\nexcept StoreLocked:\n    sys.exit(3)\n", str(tmp_path / "db")],
            capture_output=True, timeout=60,
        )
        assert child.returncode == 3, child.stderr.decode()


def test_a_tampered_app_hash_is_detected_on_open(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"a": b"1"}, 1)
    db = plyvel.DB(str(tmp_path / "db"))
    db.put(b"mapp_hash", bytes(32))
    db.close()
    with pytest.raises(StoreError, match="corrupt"):
        Store(tmp_path / "db")
    db = plyvel.DB(str(tmp_path / "db"))  # a refused store released the database
    db.put(b"t", b"\x01short")
    db.close()
    with pytest.raises(StoreError, match="corrupt"):
        Store(tmp_path / "db")
    plyvel.DB(str(tmp_path / "db")).close()


def test_a_database_of_another_layout_is_refused_with_a_clear_error(tmp_path):
    with Store(tmp_path / "db") as store:
        commit_block(store, {b"a": b"1"}, 1)
    db = plyvel.DB(str(tmp_path / "db"))
    db.put(b"mlayout", b"trolly-store/0")
    db.close()
    with pytest.raises(StoreError, match="layout 'trolly-store/0'"):
        Store(tmp_path / "db")
    db = plyvel.DB(str(tmp_path / "db"))
    db.delete(b"mlayout")
    db.close()
    with pytest.raises(StoreError, match="older unversioned layout"):
        Store(tmp_path / "db")


def test_a_corrupt_node_record_is_reported_as_corruption(tmp_path):
    with Store(tmp_path / "db", cache_nodes=0) as store:
        commit_block(store, {b"k%d" % i: b"v" for i in range(40)}, 1)
    db = plyvel.DB(str(tmp_path / "db"))
    inner = next(key for key, value in db.iterator(prefix=b"t") if len(key) == 2)
    db.put(inner, b"\x01garbage")
    db.close()
    with Store(tmp_path / "db", cache_nodes=0) as store:
        with pytest.raises(StoreError, match="corrupt"):
            store.prepare({b"k%d" % i: b"w" for i in range(40)}, 2)


def test_a_closed_store_refuses_work(tmp_path):
    store = Store(tmp_path / "db")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.prepare({b"a": b"1"}, 1)


operations = st.lists(
    st.tuples(
        st.sampled_from(["commit", "prepare-only", "reopen", "stale-commit"]),
        st.dictionaries(st.binary(min_size=1, max_size=2), st.none() | st.binary(max_size=3), max_size=12),
    ),
    min_size=1, max_size=12,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=operations, cache_nodes=st.sampled_from([0, 8, 10_000]))
def test_any_mix_of_commits_abandoned_prepares_and_reopens_matches_the_model(tmp_path_factory, history, cache_nodes):
    path = tmp_path_factory.mktemp("db") / "db"
    model, height = MemoryTree(), 0
    store = Store(path, cache_nodes=cache_nodes)
    try:
        for action, changes in history:
            if action == "reopen":
                store.close()
                store = Store(path, cache_nodes=cache_nodes)
            elif action == "prepare-only":
                store.prepare(changes, height + 1)  # abandoned: a crash before Commit
            elif action == "stale-commit":
                stale = store.prepare(changes, height + 1)
                height += 1
                store.commit(store.prepare({b"bump": b"%d" % height}, height))
                model.apply({b"bump": b"%d" % height})
                with pytest.raises(StoreError):
                    store.commit(stale)
            else:
                height += 1
                store.commit(store.prepare(changes, height))
                model.apply(changes)
            assert (store.last_height, store.last_app_hash) == (height, model.root())
            assert dict(store.reader().iterate(b"")) == model.items
        for key in list(model.items)[:5] + [b"absent"]:
            proven = store.prove(key)
            assert proven.value == model.items.get(key)
            assert proof_holds(store.last_app_hash, key, proven.value, proven.proof_type, proven.proof)
    finally:
        store.close()
