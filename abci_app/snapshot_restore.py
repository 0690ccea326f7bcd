"""State sync's four ABCI calls (CometBFT v0.38): serve our snapshots, and restore one a peer offers.

Serving: ListSnapshots lists the snapshots on disk (`snapshot_store`), LoadSnapshotChunk reads one chunk.

Restoring, on a node with no state yet, as the ABCI++ spec lays it out:
- OfferSnapshot(snapshot, app_hash): `app_hash` is what CometBFT's light client trusts for that height. We
  accept only format `FORMAT`, metadata that parses, hashes to `snapshot.hash` and names the same height, chunk
  count and app hash; anything else is REJECT_FORMAT or REJECT (CometBFT tries another snapshot).
- ApplySnapshotChunk(index, chunk, sender), in index order: a chunk whose sha256 is not the metadata's (garbage,
  truncated, from another height or another app hash) is never applied: RETRY with `refetch_chunks=[index]`
  and `reject_senders=[sender]`, so CometBFT fetches it again from another peer. A good chunk's pairs go into a
  fresh store in a scratch directory (`store_import`). After the last one, the tree's root must equal the
  trusted app hash; if it does not, or the payload does not parse, the scratch store is deleted and the answer
  is REJECT_SNAPSHOT. Only a verified store is moved onto the node's own (`replace_directory`), and Info then
  answers its height and app hash.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass

from .proto.tendermint.abci import types_pb2 as abci
from .snapshot_format import FORMAT, PayloadDecoder, SnapshotError, SnapshotMetadata, parse_metadata, snapshot_hash
from .snapshot_store import SnapshotStore
from .store import Store
from .store_import import StoreImport, replace_directory

log = logging.getLogger("trolly.abci.statesync")

Offer = abci.ResponseOfferSnapshot
Apply = abci.ResponseApplySnapshotChunk


@dataclass
class _Restore:
    """A snapshot being applied: its metadata, the trusted app hash, the scratch store, the next chunk."""

    metadata: SnapshotMetadata
    trusted_app_hash: bytes
    target: StoreImport
    decoder: PayloadDecoder
    next_index: int = 0


class StateSync:
    """The snapshot calls over `snapshots` (None: this node serves none) for the store at `store_path`."""

    def __init__(self, snapshots: SnapshotStore | None, store_path: str | os.PathLike) -> None:
        self.snapshots = snapshots
        self.store_path = os.fspath(store_path)
        self.scratch_path = self.store_path + ".restoring"
        self._restore: _Restore | None = None

    # -- serving ------------------------------------------------------------------------------------------
    def list_snapshots(self) -> abci.ResponseListSnapshots:
        response = abci.ResponseListSnapshots()
        for metadata, raw in (self.snapshots.list() if self.snapshots else []):
            response.snapshots.add(height=metadata.height, format=metadata.format, chunks=metadata.chunks,
                                   hash=snapshot_hash(raw), metadata=raw)
        return response

    def load_snapshot_chunk(self, request: abci.RequestLoadSnapshotChunk) -> abci.ResponseLoadSnapshotChunk:
        chunk = self.snapshots.load_chunk(request.height, request.format, request.chunk) if self.snapshots else b""
        return abci.ResponseLoadSnapshotChunk(chunk=chunk)

    # -- restoring ----------------------------------------------------------------------------------------
    def offer_snapshot(self, request: abci.RequestOfferSnapshot, live_height: int) -> abci.ResponseOfferSnapshot:
        snapshot = request.snapshot
        if live_height > 0:
            log.error("offered a snapshot at height %d, but this node already holds state at height %d",
                      snapshot.height, live_height)
            return Offer(result=Offer.ABORT)
        if snapshot.format != FORMAT:
            return Offer(result=Offer.REJECT_FORMAT)
        try:
            metadata = parse_metadata(snapshot.metadata)
        except SnapshotError as exc:
            log.warning("refusing the snapshot at height %d: %s", snapshot.height, exc)
            return Offer(result=Offer.REJECT)
        problem = _offer_problem(snapshot, metadata, request.app_hash)
        if problem:
            log.warning("refusing the snapshot at height %d: %s", snapshot.height, problem)
            return Offer(result=Offer.REJECT)
        self._abandon()
        self._restore = _Restore(metadata, request.app_hash, StoreImport(self.scratch_path), PayloadDecoder())
        log.info("restoring the snapshot at height %d: %d chunks, app hash %s", metadata.height, metadata.chunks,
                 metadata.app_hash.hex())
        return Offer(result=Offer.ACCEPT)

    def apply_snapshot_chunk(self, request: abci.RequestApplySnapshotChunk
                             ) -> tuple[abci.ResponseApplySnapshotChunk, bool]:
        """The answer, and whether the restore is complete: the verified store is then at `scratch_path`,
        ready for `swap_in`."""
        restore = self._restore
        if restore is None:
            return Apply(result=Apply.ABORT), False  # CometBFT applies chunks only of an accepted snapshot
        index = request.index
        if index < restore.next_index:
            return Apply(result=Apply.ACCEPT), False  # applied already: a refetched duplicate changes nothing
        if index != restore.next_index or index >= restore.metadata.chunks:
            log.warning("chunk %d arrived while chunk %d was expected; restarting this snapshot", index,
                        restore.next_index)
            self._abandon()
            return Apply(result=Apply.RETRY_SNAPSHOT), False
        if hashlib.sha256(request.chunk).digest() != restore.metadata.chunk_hashes[index]:
            log.warning("chunk %d of the snapshot at height %d from peer %s does not match its hash in the "
                        "metadata: refetching it from another peer", index, restore.metadata.height,
                        request.sender or "?")
            senders = [request.sender] if request.sender else []
            return Apply(result=Apply.RETRY, refetch_chunks=[index], reject_senders=senders), False
        try:
            for key, value in restore.decoder.feed(request.chunk):
                restore.target.add(key, value)
            restore.next_index += 1
            if restore.next_index < restore.metadata.chunks:
                return Apply(result=Apply.ACCEPT), False
            self._finish(restore)
        except SnapshotError as exc:
            log.error("the snapshot at height %d is unusable: %s", restore.metadata.height, exc)
            self._abandon()
            senders = [request.sender] if request.sender else []
            return Apply(result=Apply.REJECT_SNAPSHOT, reject_senders=senders), False
        self._restore = None
        return Apply(result=Apply.ACCEPT), True

    def _finish(self, restore: _Restore) -> None:
        restore.decoder.finish()
        if restore.decoder.entries != restore.metadata.entries:
            raise SnapshotError(f"the payload holds {restore.decoder.entries} entries, the metadata says "
                                f"{restore.metadata.entries}")
        root = restore.target.finish(restore.metadata.height)
        if root != restore.trusted_app_hash:
            raise SnapshotError(f"the restored state's app hash {root.hex()} is not the trusted "
                                f"{restore.trusted_app_hash.hex()}")
        log.info("restored %d entries at height %d, app hash %s", restore.decoder.entries, restore.metadata.height,
                 root.hex())

    def swap_in(self, live: Store) -> Store:
        """Close the node's (empty) store, move the verified restore onto it, open it with the same options."""
        live.close()
        replace_directory(self.store_path, self.scratch_path)
        return Store(self.store_path, sync=live.sync, keep_recent=live.keep_recent)

    def _abandon(self) -> None:
        if self._restore is not None:
            self._restore.target.abandon()
            self._restore = None


def _offer_problem(snapshot: abci.Snapshot, metadata: SnapshotMetadata, trusted_app_hash: bytes) -> str:
    """Why an offered snapshot's metadata disagrees with the offer ('' when it agrees)."""
    if snapshot_hash(snapshot.metadata) != snapshot.hash:
        return "its hash is not the sha256 of its metadata"
    if (metadata.height, metadata.chunks) != (snapshot.height, snapshot.chunks):
        return (f"its metadata names height {metadata.height} with {metadata.chunks} chunks, the offer height "
                f"{snapshot.height} with {snapshot.chunks}")
    if metadata.app_hash != trusted_app_hash:
        return (f"its app hash {metadata.app_hash.hex()} is not the one the light client trusts at that height "
                f"({trusted_app_hash.hex()})")
    return ""
