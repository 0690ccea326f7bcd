"""State sync in process: a fresh node restores a peer's snapshot through the four ABCI calls and reaches the
same app hash, Info answering the snapshot's height; bad chunks and bad snapshots are refused, never applied."""

from __future__ import annotations

import hashlib

import pytest
from snapshot_helpers import SENDERS, close, key_for, node, run_block, run_blocks, start_chain

from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.snapshot_format import FORMAT, PayloadDecoder, SnapshotMetadata, parse_metadata
from trolly.abci_app.store import Store
from trolly.chain.crypto import encode_address

Offer = abci.ResponseOfferSnapshot
Apply = abci.ResponseApplySnapshotChunk


@pytest.fixture
def peer(tmp_path):
    """A node at height 12 with snapshots at 4, 8 and 12 in chunks of 600 bytes."""
    app = node(tmp_path / "peer", interval=4, keep_recent=3, chunk_bytes=600)
    start_chain(app)
    run_blocks(app, 1, 12)
    app.state_sync.snapshots.wait()
    yield app
    close(app)


@pytest.fixture
def fresh(tmp_path):
    app = node(tmp_path / "fresh")
    yield app
    close(app)


def snapshot_at(app, height) -> abci.Snapshot:
    (found,) = [s for s in app.list_snapshots(abci.RequestListSnapshots()).snapshots if s.height == height]
    return found


def chunk(app, snapshot, index) -> bytes:
    request = abci.RequestLoadSnapshotChunk(height=snapshot.height, format=snapshot.format, chunk=index)
    return app.load_snapshot_chunk(request).chunk


def offer(app, snapshot, app_hash):
    return app.offer_snapshot(abci.RequestOfferSnapshot(snapshot=snapshot, app_hash=app_hash)).result


def apply(app, index, data, sender="good-peer"):
    return app.apply_snapshot_chunk(abci.RequestApplySnapshotChunk(index=index, chunk=data, sender=sender))


def trusted(peer, height) -> bytes:
    """What CometBFT's light client would pass: the app hash block `height` left (we read the peer's snapshot)."""
    return parse_metadata(snapshot_at(peer, height).metadata).app_hash


def restore(fresh, peer, height):
    snapshot = snapshot_at(peer, height)
    assert offer(fresh, snapshot, trusted(peer, height)) == Offer.ACCEPT
    for index in range(snapshot.chunks):
        assert apply(fresh, index, chunk(peer, snapshot, index)).result == Apply.ACCEPT


def test_list_snapshots_names_height_format_chunks_and_the_hash_of_the_metadata(peer):
    listed = peer.list_snapshots(abci.RequestListSnapshots()).snapshots
    assert [s.height for s in listed] == [12, 8, 4]
    assert all(s.format == FORMAT and s.chunks > 1 and s.hash == hashlib.sha256(s.metadata).digest() for s in listed)


def test_a_fresh_node_restores_a_snapshot_to_the_same_app_hash_and_goes_on_from_there(peer, fresh, tmp_path):
    restore(fresh, peer, 8)
    info = fresh.info(abci.RequestInfo())
    assert info.last_block_height == 8 and info.last_block_app_hash == trusted(peer, 8)
    assert dict(fresh.store.reader().iterate(b"")) == dict(_state_at(peer, 8))
    run_blocks(fresh, 9, 12)  # block sync replays what followed the snapshot
    assert fresh.store.last_app_hash == peer.store.last_app_hash
    assert not (tmp_path / "fresh" / "application.db.restoring").exists()


def _state_at(app, height):
    snapshot = snapshot_at(app, height)
    decoder = PayloadDecoder()
    return [pair for index in range(snapshot.chunks) for pair in decoder.feed(chunk(app, snapshot, index))]


def test_the_restored_store_survives_a_restart(peer, tmp_path):
    fresh = node(tmp_path / "restarted")
    restore(fresh, peer, 12)
    close(fresh)
    with Store(tmp_path / "restarted" / "application.db") as reopened:
        assert (reopened.last_height, reopened.last_app_hash) == (12, peer.store.last_app_hash)


def other_snapshot_chunk(tmp_path, height, index=1) -> bytes:
    """Chunk `index` of a snapshot of another chain (other genesis balances) at `height`."""
    other = node(tmp_path / "other", interval=4, chunk_bytes=600)
    start_chain(other, {key: 7 * 10**8 for key in SENDERS})
    run_blocks(other, 1, height)
    other.state_sync.snapshots.wait()
    try:
        return chunk(other, snapshot_at(other, height), index)
    finally:
        close(other)


@pytest.mark.parametrize("bad_chunk", ["garbage", "truncated", "from another height", "for another app hash",
                                       "empty"])
def test_a_bad_chunk_is_refetched_from_another_peer_and_its_sender_rejected_never_applied(peer, fresh, tmp_path,
                                                                                          bad_chunk):
    """Attack: a peer serves a chunk that is garbage, cut short, from another snapshot height, or from a snapshot
    of another app hash. The app answers RETRY with refetch_chunks=[index] and reject_senders=[that peer], and
    the good chunk from another peer is then accepted: the restore ends at the trusted app hash."""
    snapshot = snapshot_at(peer, 8)
    good = chunk(peer, snapshot, 1)
    bad = {"garbage": b"\x00\x00\x00\x05garbage!" * 40, "truncated": good[:-1],
           "from another height": chunk(peer, snapshot_at(peer, 4), 1),
           "for another app hash": other_snapshot_chunk(tmp_path, 8), "empty": b""}[bad_chunk]
    assert bad != good
    assert offer(fresh, snapshot, trusted(peer, 8)) == Offer.ACCEPT
    assert apply(fresh, 0, chunk(peer, snapshot, 0)).result == Apply.ACCEPT
    refused = apply(fresh, 1, bad, sender="evil-peer")
    assert (refused.result, list(refused.refetch_chunks), list(refused.reject_senders)) == (
        Apply.RETRY, [1], ["evil-peer"])
    for index in range(1, snapshot.chunks):
        assert apply(fresh, index, chunk(peer, snapshot, index)).result == Apply.ACCEPT
    assert fresh.info(abci.RequestInfo()).last_block_app_hash == trusted(peer, 8)


def test_a_snapshot_for_another_app_hash_than_the_trusted_one_is_refused_at_its_offer(peer, fresh):
    """Attack: a peer offers a snapshot of a state other than the one the light client trusts."""
    assert offer(fresh, snapshot_at(peer, 8), b"\x07" * 32) == Offer.REJECT
    assert fresh.info(abci.RequestInfo()).last_block_height == 0


def test_an_unknown_format_or_metadata_that_does_not_match_the_offer_is_refused(peer, fresh):
    snapshot = snapshot_at(peer, 8)
    other_format = abci.Snapshot(**{**_fields(snapshot), "format": FORMAT + 1})
    assert offer(fresh, other_format, trusted(peer, 8)) == Offer.REJECT_FORMAT
    wrong_height = abci.Snapshot(**{**_fields(snapshot), "height": 9})
    assert offer(fresh, wrong_height, trusted(peer, 8)) == Offer.REJECT
    wrong_hash = abci.Snapshot(**{**_fields(snapshot), "hash": b"\x01" * 32})
    assert offer(fresh, wrong_hash, trusted(peer, 8)) == Offer.REJECT
    garbage = abci.Snapshot(**{**_fields(snapshot), "metadata": b"{not json"})
    assert offer(fresh, garbage, trusted(peer, 8)) == Offer.REJECT


def _fields(snapshot):
    return {name: getattr(snapshot, name) for name in ("height", "format", "chunks", "hash", "metadata")}


def test_a_snapshot_whose_chunks_rebuild_another_app_hash_is_rejected_and_nothing_is_left_half_written(
        peer, fresh, tmp_path):
    """Attack: metadata that claims the trusted app hash but lists the chunks of another state (each chunk then
    matches its listed hash). The rebuilt root differs: REJECT_SNAPSHOT, the scratch store is deleted and the
    node is still empty, ready for another snapshot."""
    real = snapshot_at(peer, 8)
    older = snapshot_at(peer, 4)
    older_meta = parse_metadata(older.metadata)
    forged = SnapshotMetadata(8, trusted(peer, 8), older_meta.chunk_hashes, older_meta.entries,
                              older_meta.payload_bytes)
    raw = forged.to_bytes()
    offered = abci.Snapshot(height=8, format=FORMAT, chunks=forged.chunks, hash=forged.hash, metadata=raw)
    assert offer(fresh, offered, trusted(peer, 8)) == Offer.ACCEPT
    results = [apply(fresh, i, chunk(peer, older, i), sender="forger") for i in range(forged.chunks)]
    assert [r.result for r in results[:-1]] == [Apply.ACCEPT] * (forged.chunks - 1)
    assert results[-1].result == Apply.REJECT_SNAPSHOT and list(results[-1].reject_senders) == ["forger"]
    assert fresh.info(abci.RequestInfo()).last_block_height == 0
    assert not (tmp_path / "fresh" / "application.db.restoring").exists()
    restore(fresh, peer, real.height)  # the next, honest snapshot restores
    assert fresh.info(abci.RequestInfo()).last_block_app_hash == trusted(peer, 8)


def test_a_node_with_state_aborts_an_offered_snapshot(peer):
    assert offer(peer, snapshot_at(peer, 8), trusted(peer, 8)) == Offer.ABORT


def test_a_chunk_out_of_order_restarts_the_snapshot_and_one_without_an_offer_aborts(peer, fresh):
    snapshot = snapshot_at(peer, 8)
    assert apply(fresh, 0, chunk(peer, snapshot, 0)).result == Apply.ABORT
    assert offer(fresh, snapshot, trusted(peer, 8)) == Offer.ACCEPT
    assert apply(fresh, 2, chunk(peer, snapshot, 2)).result == Apply.RETRY_SNAPSHOT


def test_a_node_keeps_answering_after_a_restore_with_the_chain_id_of_the_snapshot(peer, fresh):
    restore(fresh, peer, 12)
    run_block(fresh, 13)
    run_block(peer, 13)
    assert fresh.store.last_app_hash == peer.store.last_app_hash
    assert fresh.query(abci.RequestQuery(path=f"/account/{_address(key_for(1013))}")).code == 0


def _address(key):
    return encode_address(key.address)
