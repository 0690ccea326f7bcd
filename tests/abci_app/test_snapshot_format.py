"""The snapshot format: the same bytes on every node for the same height, chunked, each chunk's hash in the
metadata, and a payload that parses back only when it is exactly what a correct node writes."""

from __future__ import annotations

import hashlib

import pytest
from snapshot_helpers import close, node, run_blocks, start_chain

from trolly.abci_app.snapshot_format import (FORMAT, PayloadDecoder, SnapshotError, SnapshotMetadata, chunk_payload,
                                             parse_metadata)
from trolly.abci_app.store import Store


def snapshot_files(home, height):
    directory = home / "snapshots" / f"{height:020d}-{FORMAT}"
    metadata = (directory / "metadata").read_bytes()
    chunks = [(directory / f"chunk-{i}").read_bytes() for i in range(parse_metadata(metadata).chunks)]
    return metadata, chunks


def test_two_nodes_running_the_same_blocks_write_byte_identical_snapshots(tmp_path):
    homes = [tmp_path / "a", tmp_path / "b"]
    apps = [node(home, interval=10, chunk_bytes=700) for home in homes]
    for app in apps:
        start_chain(app)
        run_blocks(app, 1, 20)
        app.state_sync.snapshots.wait()
    try:
        for height in (10, 20):
            (meta_a, chunks_a), (meta_b, chunks_b) = (snapshot_files(home, height) for home in homes)
            assert meta_a == meta_b and chunks_a == chunks_b
            metadata = parse_metadata(meta_a)
            assert metadata.height == height and metadata.chunks == len(chunks_a) > 2
            assert list(metadata.chunk_hashes) == [hashlib.sha256(c).digest() for c in chunks_a]
        assert parse_metadata(snapshot_files(homes[0], 20)[0]).app_hash == apps[0].store.last_app_hash
    finally:
        for app in apps:
            close(app)


def test_a_snapshot_is_the_state_at_its_height_although_blocks_follow(tmp_path):
    app = node(tmp_path, interval=5)
    start_chain(app)
    run_blocks(app, 1, 5)
    at_five = dict(app.store.reader().iterate(b""))
    run_blocks(app, 6, 9)  # committed while (or before) the background thread writes height 5's snapshot
    app.state_sync.snapshots.wait()
    try:
        _, chunks = snapshot_files(tmp_path, 5)
        decoder = PayloadDecoder()
        pairs = [pair for chunk in chunks for pair in decoder.feed(chunk)]
        decoder.finish()
        assert dict(pairs) == at_five and [k for k, _ in pairs] == sorted(at_five)
    finally:
        close(app)


def test_only_the_newest_keep_recent_snapshots_stay_on_disk(tmp_path):
    app = node(tmp_path, interval=3, keep_recent=2)
    start_chain(app)
    run_blocks(app, 1, 13)
    app.state_sync.snapshots.wait()
    try:
        assert [m.height for m, _ in app.state_sync.snapshots.list()] == [12, 9]
    finally:
        close(app)


def test_chunks_are_cut_at_the_chunk_size_and_records_may_straddle_them():
    entries = [(b"k%03d" % i, bytes([i]) * i) for i in range(1, 40)]
    chunks = [chunk for chunk, _ in chunk_payload(entries, chunk_bytes=64)]
    assert all(len(chunk) == 64 for chunk in chunks[:-1]) and 0 < len(chunks[-1]) <= 64
    decoder = PayloadDecoder()
    assert [pair for chunk in chunks for pair in decoder.feed(chunk)] == entries
    decoder.finish()


def test_an_empty_state_still_has_one_chunk():
    assert list(chunk_payload([], chunk_bytes=64)) == [(b"", 0)]


@pytest.mark.parametrize("payload, complaint", [
    (b"\x00\x00\x00\x02k1\x00\x00\x00\x01v" b"\x00\x00\x00\x02k0\x00\x00\x00\x01v", "out of order"),
    (b"\x00\x00\x00\x02k1\x00\x00\x00\x01v" b"\x00\x00\x00\x02k1\x00\x00\x00\x01v", "out of order"),
    (b"\x00\x00\x00\x00\x00\x00\x00\x01v", "key of 0 bytes"),
    (b"\xff\xff\xff\xffgarbage", "declares a key"),
    (b"\x00\x00\x00\x02k1\x00\x00\x00\x05v", "ends inside a record"),
])
def test_a_payload_a_correct_node_cannot_have_written_is_refused(payload, complaint):
    """Attack: a snapshot whose chunks match its own metadata but whose payload is malformed or unordered."""
    decoder = PayloadDecoder()
    with pytest.raises(SnapshotError, match=complaint):
        decoder.feed(payload)
        decoder.finish()


def test_metadata_round_trips_and_anything_but_its_canonical_bytes_is_refused():
    metadata = SnapshotMetadata(7, b"\x01" * 32, (b"\x02" * 32, b"\x03" * 32), entries=5, payload_bytes=99)
    raw = metadata.to_bytes()
    assert parse_metadata(raw) == metadata
    for bad in (raw.replace(b":", b": "), b"garbage", raw.replace(b'"format":1', b'"format":2'),
                raw.replace(b'"height":7', b'"height":-7'), raw.replace(b"03" * 32, b"03" * 31)):
        with pytest.raises(SnapshotError):
            parse_metadata(bad)


def test_a_store_keeps_no_snapshot_files_of_its_own(tmp_path):
    """Snapshots live beside the store, never inside the LevelDB directory that state sync replaces."""
    app = node(tmp_path, interval=2)
    start_chain(app)
    run_blocks(app, 1, 2)
    close(app)
    assert (tmp_path / "snapshots").is_dir() and not (tmp_path / "application.db" / "snapshots").exists()
    Store(tmp_path / "application.db").close()
