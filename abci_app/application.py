"""The ABCI 2.0 application: each method decodes a request, calls `trolly.chain.app`, encodes the answer.

Thin and boring on purpose. The rules live in `chain`; the store (`trolly.abci_app.store`) hashes
and persists. What this adapter owns is *which state each call sees*:

- committed state: what the store holds after the last Commit (Info, Query);
- execution base: committed state plus the genesis write set while block 1 is not committed yet
  (FinalizeBlock, PrepareProposal, ProcessProposal, the mempool);
- the mempool overlay: a `State` over the execution base where CheckTx NEW and RECHECK apply transactions,
  thrown away after every Commit (CometBFT then re-checks what is left in its mempool, in order).

Crash recovery (docs/architecture.md section 2): only Commit writes. InitChain keeps the genesis write set in memory and it is
persisted together with block 1, so a crash before that commit leaves height 0 and CometBFT re-sends
InitChain. FinalizeBlock is a pure function of (committed state, block): a block re-sent after a crash, or
twice in a row, gives the same answer.

Store interface used (see abci_app/store.py): `last_height`, `last_app_hash`, `reader()`, `reader_at(height)`,
`prepare(changes, height) -> PendingCommit(.app_hash)`, `commit(pending)`, `prove(key)`.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import time
from typing import Any

from trolly.chain import app as chain_app
from trolly.chain import keys
from trolly.chain.block import BlockEnv, TxResult
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.codec import canonical_json
from trolly.chain.errors import ChainError, InvalidRequest, UnexpectedFailure
from trolly.chain.market.params import MarketParams, longest_reveal_wait
from trolly.chain.params import AuthParams, get_params
from trolly.chain.query_reads import RecordingReader
from trolly.chain.state import State

from . import seed
from .base_application import BaseApplication, info_response
from .codes import error_code
from .conversions import add_events, decode_misbehavior, decode_votes, encode_validator_updates, fill_tx_result
from .conversions import timestamp_ns
from .errors import AbciAppError
from .metrics import AppMetrics
from .proto.tendermint.abci import types_pb2 as abci
from .retention import Retention
from .signature_checker import SignatureChecker, execute_block
from .snapshot_restore import StateSync
from .store import HeightPruned

log = logging.getLogger("trolly.abci.app")

APP_NAME = "trolly"
"""ResponseInfo.data: names the application to CometBFT and operators."""

APP_VERSION = 1
"""ResponseInfo.app_version: the state machine's protocol version (bump on any consensus-breaking change)."""

CHAIN_ID_KEY = keys.CHAIN_META + b"chain_id"
"""Where genesis records the chain id, so every later block (and a restarted node) knows it."""

RETAIN_HEIGHT = 0
"""ResponseCommit.retain_height without a retention policy: 0 asks CometBFT to keep every block (no pruning).
`trolly-node start` hands the app a `Retention` from the node's options, which prunes (`retention`)."""


class InvalidGenesis(AbciAppError):
    """The genesis `app_state` cannot start a chain; the node must not start (answered with an exception)."""


class ProtocolViolation(AbciAppError):
    """The consensus engine called the app out of order (e.g. Commit with no FinalizeBlock before it)."""


def _as_chain_error(exc: Exception, where: str) -> ChainError:
    """A failure a client's request caused, as a ChainError: itself if it is one, else `UnexpectedFailure`.

    An ABCI `exception` answer makes CometBFT stop the node, so nothing a transaction or a query contains may
    produce one; a bug reached this way is logged in full and answered as a failed request."""
    if isinstance(exc, ChainError):
        return exc
    log.error("%s reached a bug; answered as a failure", where, exc_info=exc)
    return UnexpectedFailure.from_exception(exc, where)


def _software_version() -> str:
    try:
        return importlib.metadata.version("trolly")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


class TrollyApplication(BaseApplication):
    """The ABCI methods, one per `Request` oneof case (the server dispatches on the case name); Echo is
    `BaseApplication`'s default, and so are the snapshot calls when no `state_sync` is given.

    Its helpers are handed in by whoever starts it (`trolly-node start`): `checks`, the memo of transactions
    whose stateless checks passed (a fresh one if none is given), and `signature_checker`, the helper
    process FinalizeBlock may check a block's signatures in (none: every check on the spot). Neither changes
    any answer, only where and how often the work is done. `metrics` (`abci_app/metrics.py`; a fresh one if none
    is given) counts what each committed block did; whoever starts the app serves its registry. `state_sync`
    serves and restores snapshots (`snapshot_restore`), `retention` decides the `retain_height` Commit answers
    (none: keep every block)."""

    def __init__(self, store: Any, chain_id_hint: str | None = None, checks: CheckedTxs | None = None,
                 signature_checker: SignatureChecker | None = None, metrics: AppMetrics | None = None,
                 state_sync: StateSync | None = None, retention: Retention | None = None) -> None:
        self.store = store
        self.state_sync = state_sync
        self.retention = retention
        self.chain_id_hint = chain_id_hint
        self.checks = checks if checks is not None else CheckedTxs()
        self.signature_checker = signature_checker
        self.metrics = metrics if metrics is not None else AppMetrics()
        self._genesis_changes: dict[bytes, bytes | None] | None = None  # until block 1 is committed
        self._initial_height = 1
        self._pending: Any = None  # the PendingCommit of the last FinalizeBlock
        self._pending_txs: list[bytes] = []  # that block's transactions, forgotten by `checks` at its Commit
        self._mempool: State | None = None
        self._mempool_auth: AuthParams | None = None  # the overlay's auth params, read when it is built
        self._check_env: BlockEnv | None = None  # the last env CheckTx ran under (see `_next_env`)
        self._last_block_time_ns = 0  # for CheckTx's env only; never used by consensus paths
        self._chain_id = self._read_chain_id(State(store.reader()))
        self.metrics.recount_tasks(State(store.reader()))
        self._observe_store(store)
        if state_sync is not None and state_sync.snapshots is not None:
            state_sync.snapshots.on_written = self.metrics.snapshot_seconds.observe

    def _observe_store(self, store: Any) -> None:
        """Point the store's prune timings at the metrics."""
        store.on_pruned = self.metrics.prune_seconds.observe

    # -- which state a call sees ---------------------------------------------------------------------------
    def _execution_base(self) -> State:
        """Committed state plus the genesis write set while it is pending; journal cleared."""
        state = State(self.store.reader())
        for key, value in (self._genesis_changes or {}).items():
            if value is None:
                state.delete(key)
            else:
                state.set(key, value)
        state.discard_journal()
        return state

    def _read_chain_id(self, state: State) -> str:
        raw = state.get(CHAIN_ID_KEY)
        return raw.decode() if raw is not None else (self.chain_id_hint or "")

    def _mempool_state(self) -> tuple[State, AuthParams]:
        """The mempool overlay and its auth params (read once: no transaction changes them)."""
        if self._mempool is None or self._mempool_auth is None:
            self._mempool = self._execution_base()
            self._mempool_auth = get_params(self._mempool, AuthParams)
        return self._mempool, self._mempool_auth

    def _next_env(self) -> BlockEnv:
        """The env CheckTx runs under: the next height, the last block's time (no clock in the chain).
        Built again only when one of them changed, not for every transaction."""
        env = self._check_env
        height = self.store.last_height + 1
        if (env is None or env.height != height or env.time_ns != self._last_block_time_ns
                or env.chain_id != self._chain_id):
            env = self._check_env = BlockEnv(chain_id=self._chain_id, height=height,
                                             time_ns=self._last_block_time_ns)
        return env

    def on_all_connections_closed(self) -> None:
        """The consensus engine went away (the server calls this when its last connection closes).

        Its mempool is gone, so the overlay of admitted txs must go too, or their nonces would make the same
        txs look like replays when they are submitted again. An uncommitted FinalizeBlock result is dropped:
        the engine re-sends that block after its handshake. A pending genesis stays (re-sent InitChain
        replaces it anyway).
        """
        self._mempool = None
        self._pending = None

    def on_mempool_connection_replaced(self) -> None:
        """The engine replaced a failed mempool connection and re-checks its waiting txs on the new one next
        (the server calls this on the new connection's first CheckTx): the overlay they were admitted into
        goes, so that the re-check rebuilds it instead of seeing every tx as a replay."""
        self._mempool = None

    # -- connection: info / query ---------------------------------------------------------------------------
    def info(self, request: abci.RequestInfo) -> abci.ResponseInfo:
        """The last COMMITTED height and app hash: CometBFT replays any block after it."""
        height = self.store.last_height
        log.debug("Info from %s: app at height %d", request.version or "?", height)
        return info_response(height, self.store.last_app_hash, data=APP_NAME, version=_software_version(),
                             app_version=APP_VERSION)

    def query(self, request: abci.RequestQuery) -> abci.ResponseQuery:
        """At the last committed height (height 0 asks for it), or an older one the store still keeps, with no
        proof then (the tree holds the latest version only); a pruned height is a clear error. With `prove`, at
        the last height: one ICS23 proof per state key the answer depends on (`trolly.chain.query_reads`)."""
        height = self.store.last_height
        past = request.height not in (0, height)
        if request.prove and not past:
            return self._proven_query(request)
        try:
            reader = self._reader_at(request.height) if past else self.store.reader()
            value = canonical_json(chain_app.query(State(reader), request.path, request.data).value)
        except Exception as exc:  # noqa: BLE001 - an exception answer would stop CometBFT (see below)
            return _failed_query(exc, request.path, height)
        if past:
            info = "no Merkle proof at a past height: the tree keeps the latest version only" if request.prove else ""
            return abci.ResponseQuery(value=value, height=request.height, info=info)
        return abci.ResponseQuery(value=value, height=height)

    def _proven_query(self, request: abci.RequestQuery) -> abci.ResponseQuery:
        """The answer at the last height and the proof of every key it read, with no commit in between."""
        with self.store.holding_commits():
            height = self.store.last_height
            recorder = RecordingReader(self.store.reader())
            try:
                result = chain_app.query(State(recorder), request.path, request.data)
                value = canonical_json(result.value)
            except Exception as exc:  # noqa: BLE001 - as in `query`
                return _failed_query(exc, request.path, height)
            reads = recorder.reads()
            response = abci.ResponseQuery(value=value, height=height)
            if reads.unindexed:
                response.info = (f"no Merkle proof is available for {request.path}: it lists the keys under "
                                 f"{', '.join(p.hex() for p in reads.unindexed)}, which no listing index covers")
                return response
            for key in reads.keys:
                proven = self.store.prove(key)
                response.proof_ops.ops.add(type=proven.proof_type, key=key, data=proven.proof)
            if result.proof_key is not None:
                response.key = result.proof_key
            return response

    def _reader_at(self, height: int):
        try:
            return self.store.reader_at(height)
        except HeightPruned as exc:
            raise InvalidRequest(str(exc)) from None

    # -- connection: snapshot (state sync) --------------------------------------------------------------------
    def list_snapshots(self, request: abci.RequestListSnapshots) -> abci.ResponseListSnapshots:
        if self.state_sync is None:
            return super().list_snapshots(request)
        return self.state_sync.list_snapshots()

    def load_snapshot_chunk(self, request: abci.RequestLoadSnapshotChunk) -> abci.ResponseLoadSnapshotChunk:
        if self.state_sync is None:
            return super().load_snapshot_chunk(request)
        return self.state_sync.load_snapshot_chunk(request)

    def offer_snapshot(self, request: abci.RequestOfferSnapshot) -> abci.ResponseOfferSnapshot:
        if self.state_sync is None:
            return super().offer_snapshot(request)
        return self.state_sync.offer_snapshot(request, self.store.last_height)

    def apply_snapshot_chunk(self, request: abci.RequestApplySnapshotChunk) -> abci.ResponseApplySnapshotChunk:
        """Apply one chunk; after the last, verified one, the restored store replaces this node's (empty) one
        and Info answers the snapshot's height and app hash."""
        if self.state_sync is None:
            return super().apply_snapshot_chunk(request)
        response, restored = self.state_sync.apply_snapshot_chunk(request)
        if restored:
            self.store = self.state_sync.swap_in(self.store)
            self._observe_store(self.store)
            self.metrics.recount_tasks(State(self.store.reader()))
            self._chain_id = self._read_chain_id(State(self.store.reader()))
            self._genesis_changes = self._pending = self._mempool = self._check_env = None
        return response

    # -- connection: mempool ----------------------------------------------------------------------------------
    def check_tx(self, request: abci.RequestCheckTx) -> abci.ResponseCheckTx:
        """NEW and RECHECK both apply the tx to the mempool overlay; a failing tx leaves it unchanged.

        A RECHECK (and any later sight of the same bytes) finds the tx's decoding and signature in `checks`
        and runs only the stateful part. The answer carries no events: CometBFT v0.38's mempool and its
        `broadcast_tx_sync` use only the code, log, codespace and gas; the block's results carry the events."""
        mempool, auth_params = self._mempool_state()
        marker = mempool.snapshot()
        try:
            result = chain_app.check_tx(mempool, self._next_env(), request.tx, self.checks, auth_params)
        except Exception as exc:  # noqa: BLE001 - chain.check_tx fails txs itself; this guards the overlay too
            mempool.rollback(marker)
            result = chain_app.error_result(_as_chain_error(exc, "CheckTx"))
        mempool.discard_journal()  # an admitted tx stays until Commit: no need to keep its undo history
        return fill_tx_result(abci.ResponseCheckTx(), result, events=False)

    # -- connection: consensus --------------------------------------------------------------------------------
    def init_chain(self, request: abci.RequestInitChain) -> abci.ResponseInitChain:
        if self.store.last_height > 0:
            raise ProtocolViolation(f"InitChain on a chain already at height {self.store.last_height}")
        if self.chain_id_hint and request.chain_id != self.chain_id_hint:
            log.warning("InitChain chain id %r differs from the configured %r; using InitChain's",
                        request.chain_id, self.chain_id_hint)
        try:
            app_state = json.loads(request.app_state_bytes or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidGenesis(f"genesis app_state is not valid JSON: {exc}") from None
        if not isinstance(app_state, dict):
            raise InvalidGenesis("genesis app_state must be a JSON object")
        state = State(self.store.reader())
        state.set(CHAIN_ID_KEY, request.chain_id.encode())
        env = BlockEnv(chain_id=request.chain_id, height=0, time_ns=timestamp_ns(request.time))
        try:
            validators = chain_app.init_chain(state, env, app_state)
        except ChainError as error:
            raise InvalidGenesis(f"genesis app_state rejected: {error.log}") from None
        changes = state.changes()
        app_hash = self.store.prepare(changes, 0).app_hash
        self._genesis_changes = changes
        self._initial_height = max(request.initial_height, 1)
        self._chain_id = request.chain_id
        self._last_block_time_ns = env.time_ns
        self._pending = None
        self._mempool = None
        log.info("InitChain %s: %d state entries, %d validators, app hash %s", request.chain_id, len(changes),
                 len(validators), app_hash.hex())
        return abci.ResponseInitChain(validators=encode_validator_updates(validators), app_hash=app_hash)

    def prepare_proposal(self, request: abci.RequestPrepareProposal) -> abci.ResponsePrepareProposal:
        """Keep the mempool's txs in order while they fit in max_tx_bytes and still pass against a scratch
        state; stop at the first that does not fit (later txs may depend on it, e.g. by nonce)."""
        scratch = self._execution_base()
        env = BlockEnv(chain_id=self._chain_id, height=request.height, time_ns=timestamp_ns(request.time),
                       proposer_address=request.proposer_address)
        kept: list[bytes] = []
        total = 0
        seed_tx = seed.build_seed_tx(scratch, self._chain_id, request.height, request.local_last_commit)
        if seed_tx is not None and len(seed_tx) <= request.max_tx_bytes:
            kept.append(seed_tx)  # first, so that the block's sampling seed comes from the vote extensions
            total += len(seed_tx)
        auth_params = get_params(scratch, AuthParams)
        for tx in request.txs:
            if total + len(tx) > request.max_tx_bytes:
                break
            if chain_app.check_tx(scratch, env, tx, self.checks, auth_params).ok:
                kept.append(tx)
                total += len(tx)
        return abci.ResponsePrepareProposal(txs=kept)

    def process_proposal(self, request: abci.RequestProcessProposal) -> abci.ResponseProcessProposal:
        """Reject a block carrying any tx that fails the stateless checks; stateful failures are fine (they
        are recorded in the block's results, and their fee logic runs in FinalizeBlock). What an earlier
        proposal alone left in `checks` goes first, and what this one left goes too if it is rejected."""
        self.checks.drop_provisional()
        base = self._execution_base()
        auth_params = get_params(base, AuthParams)
        for index, tx in enumerate(request.txs):
            if index == 0 and seed.is_seed_tx(tx):
                try:
                    seed.verify_seed_tx(base, self._chain_id, request.height, tx, request.proposed_last_commit)
                except seed.InvalidSeedTx as error:
                    log.warning("rejecting proposal at height %d: %s", request.height, error)
                    self.checks.drop_provisional()
                    return abci.ResponseProcessProposal(status=abci.ResponseProcessProposal.REJECT)
                continue
            result = chain_app.check_tx_stateless_only(tx, self._chain_id, base, self.checks, auth_params)
            if not result.ok:
                log.warning("rejecting proposal at height %d: tx %d: %s", request.height, index, result.log)
                self.checks.drop_provisional()
                return abci.ResponseProcessProposal(status=abci.ResponseProcessProposal.REJECT)
        return abci.ResponseProcessProposal(status=abci.ResponseProcessProposal.ACCEPT)

    def extend_vote(self, request: abci.RequestExtendVote) -> abci.ResponseExtendVote:
        """The same deterministic bytes from every validator; CometBFT's signature over them feeds the seed."""
        return abci.ResponseExtendVote(vote_extension=seed.extension_for(request.height))

    def verify_vote_extension(self, request: abci.RequestVerifyVoteExtension
                              ) -> abci.ResponseVerifyVoteExtension:
        """Accept the expected extension, or none (a validator without it only leaves the seed to others)."""
        status = (abci.ResponseVerifyVoteExtension.ACCEPT
                  if request.vote_extension in (b"", seed.extension_for(request.height))
                  else abci.ResponseVerifyVoteExtension.REJECT)
        return abci.ResponseVerifyVoteExtension(status=status)

    def finalize_block(self, request: abci.RequestFinalizeBlock) -> abci.ResponseFinalizeBlock:
        """Execute the block against the execution base and hash the result; NOTHING is written here."""
        started = time.perf_counter()
        expected = self.store.last_height + 1 if self.store.last_height > 0 else self._initial_height
        if self.store.last_height == 0 and self._genesis_changes is None:
            raise ProtocolViolation("FinalizeBlock before InitChain")
        if request.height != expected:
            raise ProtocolViolation(f"FinalizeBlock for height {request.height}, expected {expected}")
        state = self._execution_base()
        txs = list(request.txs)
        seed_result = None
        sampling_seed = b""
        if txs and seed.is_seed_tx(txs[0]):  # accepted by ProcessProposal; checked again, deterministically
            try:
                sampling_seed = seed.verify_seed_tx(state, self._chain_id, request.height, txs[0],
                                                    request.decided_last_commit)
                seed_result = TxResult()
            except seed.InvalidSeedTx as error:
                seed_result = TxResult(code=1, codespace="seed", log=str(error))
            txs = txs[1:]
        env = BlockEnv(
            chain_id=self._chain_id, height=request.height, time_ns=timestamp_ns(request.time),
            proposer_address=request.proposer_address, block_hash=request.hash,
            last_commit=decode_votes(request.decided_last_commit),
            misbehavior=decode_misbehavior(request.misbehavior), sampling_seed=sampling_seed,
        )
        output = execute_block(state, env, txs, self.checks, self.signature_checker)
        self._pending = self.store.prepare(state.changes(), request.height)
        self._pending_txs = txs
        self._last_block_time_ns = env.time_ns
        response = abci.ResponseFinalizeBlock(
            validator_updates=encode_validator_updates(output.validator_updates), app_hash=self._pending.app_hash)
        add_events(response.events, output.events)
        if seed_result is not None:
            fill_tx_result(response.tx_results.add(), seed_result)
        for result in output.tx_results:
            fill_tx_result(response.tx_results.add(), result)
        self.metrics.block_finalized(txs, output.tx_results, output.events, started)
        return response

    def commit(self, request: abci.RequestCommit) -> abci.ResponseCommit:
        """The only writer: persists the last FinalizeBlock's write set and (height, app hash) atomically."""
        if self._pending is None:
            raise ProtocolViolation("Commit without a FinalizeBlock before it")
        self.store.commit(self._pending)
        self.metrics.block_committed(self.store.last_height, State(self.store.reader()))
        height = self._pending.height
        self._pending = None
        self.checks.forget(self._pending_txs)  # decided and applied: never checked again (a replay fails its nonce)
        self.checks.drop_provisional()  # what undecided proposals left
        self._pending_txs = []
        self._genesis_changes = None
        self._mempool = None  # CometBFT re-checks its remaining mempool txs next, rebuilding the overlay
        if self.state_sync is not None and self.state_sync.snapshots is not None:
            self.state_sync.snapshots.after_commit(self.store, height)  # written on a background thread
        return abci.ResponseCommit(retain_height=self._retain_height(height))

    def _retain_height(self, height: int) -> int:
        if self.retention is None:
            return RETAIN_HEIGHT
        market = get_params(State(self.store.reader()), MarketParams)
        return self.retention.retain_height(height, longest_reveal_wait(market))


def _failed_query(exc: Exception, path: str, height: int) -> abci.ResponseQuery:
    """A query's failure as its answer: an exception answer would stop CometBFT."""
    failure = error_code(_as_chain_error(exc, f"query {path[:64]!r}"))
    return abci.ResponseQuery(code=failure.code, codespace=failure.codespace, log=failure.log, height=height)
