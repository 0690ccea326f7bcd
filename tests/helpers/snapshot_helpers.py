"""Shared by the state-sync and pruning tests: a real store and app driven through blocks of transfers, with
snapshots taken as a node takes them, and a fresh node to restore into."""

from __future__ import annotations

from pathlib import Path

from abci_helpers import CHAIN_ID, genesis_bytes, key_for, send_tx
from google.protobuf.timestamp_pb2 import Timestamp

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.retention import Retention
from trolly.abci_app.snapshot_restore import StateSync
from trolly.abci_app.snapshot_store import SnapshotStore
from trolly.abci_app.store import Store

SENDERS = [key_for(i) for i in range(1, 6)]
START = 10**9


def node(home: Path, interval: int = 0, keep_recent: int = 2, chunk_bytes: int = 1024, state_keep_recent: int = 1,
         retention: Retention | None = None) -> TrollyApplication:
    """An app over a real store in `home` with a snapshot store (no chain started yet)."""
    home.mkdir(parents=True, exist_ok=True)
    store = Store(home / "application.db", keep_recent=state_keep_recent)
    snapshots = SnapshotStore(home / "snapshots", interval, keep_recent, chunk_bytes=chunk_bytes)
    return TrollyApplication(store, state_sync=StateSync(snapshots, home / "application.db"), retention=retention)


def start_chain(app: TrollyApplication, funded=None) -> None:
    funded = funded or {key: START for key in SENDERS}
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1, app_state_bytes=genesis_bytes(funded)))


def block_txs(height: int) -> list[bytes]:
    """A few transfers whose recipients change with the height, so the state grows and changes every block."""
    sender = SENDERS[height % len(SENDERS)]
    nonce = (height - 1) // len(SENDERS)
    return [send_tx(sender, key_for(1000 + height).address, 1 + height, nonce)]


def run_block(app: TrollyApplication, height: int, txs: list[bytes] | None = None) -> abci.ResponseCommit:
    response = app.finalize_block(abci.RequestFinalizeBlock(
        height=height, txs=block_txs(height) if txs is None else txs, time=Timestamp(seconds=1_700_000_000 + height)))
    assert all(result.code == 0 for result in response.tx_results), [r.log for r in response.tx_results]
    return app.commit(abci.RequestCommit())


def run_blocks(app: TrollyApplication, first: int, last: int) -> None:
    for height in range(first, last + 1):
        run_block(app, height)


def close(app: TrollyApplication) -> None:
    app.state_sync.snapshots.close()
    app.store.close()
