"""Pruning: the store keeps `keep_recent` heights of its state readable and deletes older ones in the same
batch as each commit; a query at a pruned height is a clear error naming the oldest height kept; Commit's
`retain_height` lets CometBFT prune its blocks, never below the evidence age, the market's windows or the
snapshots a joining node catches up from."""

from __future__ import annotations

import pytest
from abci_helpers import key_for
from snapshot_helpers import close, node, run_block, run_blocks, start_chain

from trolly.abci_app import store_history as history
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.node_options import DEFAULT_STATE_KEEP_RECENT, NodeOptions, read_node_options
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.retention import Retention
from trolly.abci_app.store import HeightPruned, Store
from trolly.abci_app.home import HomeError
from trolly.chain.crypto import encode_address
from trolly.chain.market.params import MarketParams, longest_reveal_wait


def history_heights(store: Store) -> set[int]:
    with store._db.iterator(prefix=history.CHANGED_PREFIX, include_value=False) as keys:
        return {int.from_bytes(key[1:9], "big") for key in keys}


def history_records(store: Store) -> int:
    with store._db.iterator(prefix=history.HISTORY_PREFIX, include_value=False) as keys:
        return sum(1 for _ in keys)


def test_older_heights_read_what_they_held_and_pruning_deletes_what_falls_out(tmp_path):
    app = node(tmp_path, state_keep_recent=5)
    start_chain(app)
    states = {}
    for height in range(1, 31):
        run_block(app, height)
        states[height] = dict(app.store.reader().iterate(b""))
    store = app.store
    try:
        assert store.oldest_height == 26
        for height in range(26, 31):
            reader = store.reader_at(height)
            assert dict(reader.iterate(b"")) == states[height]
            assert all(reader.get(key) == value for key, value in states[height].items())
            newer_only = set(states[30]) - set(states[height])
            assert (height == 30 or newer_only) and all(reader.get(key) is None for key in newer_only)
        assert history_heights(store) == {27, 28, 29, 30}  # what reading 26..29 needs, nothing older
        with pytest.raises(HeightPruned, match="oldest height kept is 26"):
            store.reader_at(25)
        with pytest.raises(HeightPruned, match="not committed yet"):
            store.reader_at(31)
    finally:
        close(app)


def test_the_undo_log_stays_bounded_however_many_blocks_follow(tmp_path):
    app = node(tmp_path, state_keep_recent=4)
    start_chain(app)
    run_blocks(app, 1, 20)
    size_at_20 = history_records(app.store)
    run_blocks(app, 21, 120)
    try:
        assert history_records(app.store) == size_at_20 and len(history_heights(app.store)) == 3
    finally:
        close(app)


def test_a_store_keeping_only_the_latest_height_writes_no_undo_log_and_drops_one_it_had(tmp_path):
    app = node(tmp_path, state_keep_recent=10)
    start_chain(app)
    run_blocks(app, 1, 6)
    close(app)
    store = Store(tmp_path / "application.db", keep_recent=1)
    try:
        assert history_heights(store)
        reopened = TrollyApplication(store)
        run_block(reopened, 7)
        assert history_heights(store) == set() and history_records(store) == 0 and store.oldest_height == 7
    finally:
        store.close()


def test_a_query_at_a_kept_height_answers_its_value_and_at_a_pruned_one_names_the_oldest_kept(tmp_path):
    """A query at a pruned height must never get a wrong (e.g. the latest) answer: a clear error instead."""
    app = node(tmp_path, state_keep_recent=3)
    start_chain(app)
    run_blocks(app, 1, 10)
    recipient = encode_address(key_for(1009).address)  # funded by block 9
    try:
        path = f"/account/{recipient}"
        latest = app.query(abci.RequestQuery(path=path))
        at_nine = app.query(abci.RequestQuery(path=path, height=9, prove=True))
        at_eight = app.query(abci.RequestQuery(path=path, height=8))
        assert latest.code == at_nine.code == at_eight.code == 0
        assert at_nine.value == latest.value and at_nine.height == 9 and "no Merkle proof" in at_nine.info
        assert at_eight.value != at_nine.value and at_eight.height == 8
        pruned = app.query(abci.RequestQuery(path=path, height=7))
        assert pruned.code != 0 and not pruned.value
        assert "height 7 is pruned" in pruned.log and "oldest height kept is 8" in pruned.log
        future = app.query(abci.RequestQuery(path=path, height=11))
        assert future.code != 0 and "not committed yet" in future.log
    finally:
        close(app)


def test_commit_answers_a_retain_height_that_keeps_the_most_of_every_floor(tmp_path):
    market_window = longest_reveal_wait(MarketParams())
    retention = Retention(min_retain_blocks=3, evidence_max_age_blocks=5, snapshot_blocks=4)
    app = node(tmp_path, retention=retention)
    start_chain(app)
    answers = {height: run_block(app, height).retain_height for height in range(1, market_window + 12)}
    try:
        assert answers[market_window] == 0  # fewer blocks than the longest floor (the market's): keep all
        assert answers[market_window + 11] == 12  # the last `market_window` blocks
    finally:
        close(app)


def test_retain_height_floors_and_zero_turning_pruning_off():
    assert Retention(0, 100, 100).retain_height(10_000, 50) == 0
    assert Retention(1000, 100, 40).retain_height(10_000, 50) == 9001
    assert Retention(10, 100, 40).retain_height(10_000, 50) == 9901
    assert Retention(10, 1, 400).retain_height(10_000, 50) == 9601
    assert Retention(10, 1, 4).retain_height(10_000, 50) == 9951


def test_node_options_defaults_keep_the_market_windows_and_bad_values_are_named():
    defaults = read_node_options({})
    assert defaults == NodeOptions() and defaults.state_keep_recent == DEFAULT_STATE_KEEP_RECENT
    assert defaults.state_keep_recent >= longest_reveal_wait(MarketParams())
    assert defaults.min_retain_blocks >= longest_reveal_wait(MarketParams())
    for bad in ({"snapshot_interval": -1}, {"state_keep_recent": 0}, {"min_retain_blocks": "100"},
                {"snapshot_keep_recent": True}):
        with pytest.raises(HomeError, match=next(iter(bad))):
            read_node_options(bad)


def test_past_reads_keep_keys_with_zero_bytes_and_shared_prefixes_apart(tmp_path):
    keys = [b"a", b"a\x00", b"a\x00\x00", b"a\x00b", b"a\xff", b"ab", b"b"]
    truth: dict[int, dict[bytes, bytes]] = {}
    current: dict[bytes, bytes] = {}
    with Store(tmp_path / "db", keep_recent=10) as store:
        for height in range(1, 5):
            changes = {key: b"%d:%s" % (height, key) for key in keys[height - 1::2]}
            if height == 3:
                changes[b"a\x00"] = None
            store.commit(store.prepare(changes, height))
            current = {k: v for k, v in {**current, **changes}.items() if v is not None}
            truth[height] = dict(current)
        states = {}
        for height in range(1, 5):
            reader = store.reader_at(height)
            states[height] = dict(reader.iterate(b""))
            assert states[height] == truth[height]
            assert all(reader.get(key) == states[height].get(key) for key in keys)
            for prefix in (b"a", b"a\x00", b"a\x00\x00", b"b"):
                assert list(reader.iterate(prefix)) == sorted((k, v) for k, v in states[height].items()
                                                              if k.startswith(prefix))
        assert b"a\x00" in states[2] and b"a\x00" not in states[3]
        assert states[4] == dict(store.reader().iterate(b""))
