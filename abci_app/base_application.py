"""The default ABCI answers, written once: Trolly's application and the benchmarks' noop app both build on them.

As CometBFT's `abci/types.BaseApplication` does, `BaseApplication` answers every call an application may leave
to a default: Echo echoes, state sync is not offered (no snapshots listed, every offered one refused), a
proposal is the mempool's transactions in order while they fit and every proposal and vote extension is
accepted, and Commit retains every block. What only the application can know (Info, InitChain, CheckTx,
FinalizeBlock) it leaves to the subclass, so that `AbciServer` refuses an application that forgot one; and
`info_response` writes Info's one rule both share (the app hash only once a block is committed).
"""

from __future__ import annotations

from .proto.tendermint.abci import types_pb2 as abci


def info_response(height: int, app_hash: bytes, **names) -> abci.ResponseInfo:
    """ResponseInfo at the last committed `height`: `app_hash` once a block is committed, empty at height 0
    (CometBFT then sends InitChain). `names`: the application's `data`, `version` and `app_version`."""
    return abci.ResponseInfo(last_block_height=height, last_block_app_hash=app_hash if height > 0 else b"",
                             **names)


class BaseApplication:
    """The ABCI methods with a default answer; a subclass adds `info`, `init_chain`, `check_tx` and
    `finalize_block` and overrides what it decides otherwise."""

    # -- connection: info / query ---------------------------------------------------------------------------
    def echo(self, request: abci.RequestEcho) -> abci.ResponseEcho:
        return abci.ResponseEcho(message=request.message)

    def query(self, request: abci.RequestQuery) -> abci.ResponseQuery:
        return abci.ResponseQuery(code=1, log=f"{type(self).__name__} answers no queries")

    # -- connection: consensus --------------------------------------------------------------------------------
    def prepare_proposal(self, request: abci.RequestPrepareProposal) -> abci.ResponsePrepareProposal:
        """The mempool's transactions in its order, as many as fit (CometBFT may offer more than fit)."""
        chosen, size = [], 0
        for tx in request.txs:
            size += len(tx)
            if size > request.max_tx_bytes:
                break
            chosen.append(tx)
        return abci.ResponsePrepareProposal(txs=chosen)

    def process_proposal(self, request: abci.RequestProcessProposal) -> abci.ResponseProcessProposal:
        return abci.ResponseProcessProposal(status=abci.ResponseProcessProposal.ACCEPT)

    def extend_vote(self, request: abci.RequestExtendVote) -> abci.ResponseExtendVote:
        return abci.ResponseExtendVote()

    def verify_vote_extension(self, request: abci.RequestVerifyVoteExtension) -> abci.ResponseVerifyVoteExtension:
        return abci.ResponseVerifyVoteExtension(status=abci.ResponseVerifyVoteExtension.ACCEPT)

    def commit(self, request: abci.RequestCommit) -> abci.ResponseCommit:
        return abci.ResponseCommit()

    # -- connection: snapshot (state sync is not offered) ------------------------------------------------------
    def list_snapshots(self, request: abci.RequestListSnapshots) -> abci.ResponseListSnapshots:
        return abci.ResponseListSnapshots()

    def offer_snapshot(self, request: abci.RequestOfferSnapshot) -> abci.ResponseOfferSnapshot:
        return abci.ResponseOfferSnapshot(result=abci.ResponseOfferSnapshot.REJECT)

    def load_snapshot_chunk(self, request: abci.RequestLoadSnapshotChunk) -> abci.ResponseLoadSnapshotChunk:
        return abci.ResponseLoadSnapshotChunk()

    def apply_snapshot_chunk(self, request: abci.RequestApplySnapshotChunk) -> abci.ResponseApplySnapshotChunk:
        """Never reached (every snapshot is refused at its offer); ABORT ends a state sync begun regardless."""
        return abci.ResponseApplySnapshotChunk(result=abci.ResponseApplySnapshotChunk.ABORT)
