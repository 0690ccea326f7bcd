"""The handshake and the block loop: what CometBFT's consensus does for the app, with one validator.

Handshake (on every (re)connection), as CometBFT's `Handshaker`:
  1. Info. If the app is at height 0, InitChain with the genesis (and record its outcome).
  2. If the app is ahead of the block store, or its app hash differs from the one recorded for its height,
     stop with `HandshakeError`: nothing can reconcile them.
  3. Replay the stored blocks the app has not committed: the exact RequestFinalizeBlock recorded, then
     Commit, checking each app hash against the recorded one.
  4. Re-check the mempool against the (possibly restarted) app.

The mempool connection heals without a handshake: when it fails (the app answered a CheckTx with an
exception, or the connection dropped), a watcher re-opens it at once and re-checks the waiting txs on it,
dropping those that now fail; a CheckTx arriving meanwhile waits for that under the mempool lock. The
consensus connection is untouched and no block is replayed.

Each block at height H (CometBFT v0.38 semantics):
  PrepareProposal (mempool txs within the byte budget) -> header -> ProcessProposal -> FinalizeBlock ->
  store the block and its results (one synchronous batch: the block is now decided) -> Commit ->
  drop the block's txs from the mempool and re-check the rest -> publish NewBlock and Tx events.
  The app hash FinalizeBlock returns for H appears in block H+1's `header.app_hash`; validator updates
  from H apply at H+2.
  Vote extensions, where the consensus params enable them at H: once ProcessProposal accepts H, ExtendVote
  for H (as a precommitting validator), signed with the validator's key over CometBFT's
  VoteExtensionSignBytes; PrepareProposal of H+1 gets them in `local_last_commit`, so the app's seed
  transaction (abci_app/seed.py) seeds the market's sampling on the solo engine as on CometBFT. The extension
  lives in memory: the first block after a restart has none (the market defers sampling by a block).

The app may die at any point: if it dies before the block is stored, the block is simply proposed again;
after, the handshake replays it. Either way no tx is lost or applied twice.

A `StepObserver` handed to the producer is told of each block's steps as it reaches them (`STEPS`:
`before_finalize`, FinalizeBlock not sent; `after_finalize`, FinalizeBlock answered and the block stored,
Commit not sent; `after_commit`, Commit and re-check done, next block not started), and the block waits for
it. The node runs without one; crash tests hand one in to stop the engine at a precise step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from ..home import COMETBFT_VERSION, Home, format_time, parse_time
from ..proto.tendermint.abci import types_pb2
from ..seed import extension_sign_bytes, is_seed_tx
from . import AppConnectionLost, EngineError, HandshakeError, blocks, hashing
from .abci_client import AbciClient
from .blockstore import BlockStore, StoredBlock
from .blocks import BLOCK_PROTOCOL_VERSION, P2P_PROTOCOL_VERSION
from .chainstate import (
    apply_validator_updates,
    genesis_validators,
    init_chain_request,
    max_data_bytes,
    merge_params,
    timestamp,
)
from .event_bus import EventBus
from .mempool import Mempool
from .metrics import EngineMetrics

log = logging.getLogger("trolly.engine")

ABCI_VERSION = "2.0.0"
STEPS = ("before_finalize", "after_finalize", "after_commit")
"""The points of a block a `StepObserver` is told of, in the order a block reaches them."""


class StepObserver(Protocol):
    async def reached(self, step: str, height: int, has_txs: bool) -> None:
        """Block `height` (carrying clients' transactions or not: its seed transaction does not count) is at
        `step`; the block goes on when this returns."""


@dataclass(frozen=True)
class EngineConfig:
    proxy_app: str = "tcp://127.0.0.1:26658"
    block_interval: float = 1.0
    """Seconds between the end of one block and the start of the next (CometBFT's timeout_commit)."""
    reconnect_interval: float = 0.2


MEMPOOL_RECHECK_ATTEMPTS = 3
"""Re-checks in a row that may fail to make progress (the mempool connection is lost again without the app
having refused any tx) before the mempool connection counts as lost with the app."""


class Producer:
    """Owns the ABCI client while connected; the RPC reads `client` (None while the app is away)."""

    def __init__(self, home: Home, config: EngineConfig, blockstore: BlockStore, mempool: Mempool, events: EventBus,
                 observer: StepObserver | None = None, metrics: EngineMetrics | None = None) -> None:
        self.home = home
        self.metrics = metrics if metrics is not None else EngineMetrics()
        """CometBFT's metrics that the engine stands in for (`engine/metrics.py`), kept at every Commit."""
        self.config = config
        self.blockstore = blockstore
        self.mempool = mempool
        self.events = events
        self.chain_id = home.chain_id
        self.client: AbciClient | None = None
        self.app_version = 0
        self.visible_height = blockstore.last_height
        """The last block the RPC shows: stored AND committed by the app (CometBFT indexes after Commit)."""
        self.connected = asyncio.Event()
        """Set while a handshaken app is connected (the RPC can reach it); cleared when it is lost."""
        self._key = home.validator_key
        self._observer = observer
        self._extension: tuple[int, bytes, bytes] | None = None
        """(height, vote extension, its signature) of this validator's last precommit, for the next proposal."""

    @property
    def genesis(self) -> dict:
        return self.home.genesis

    @property
    def initial_height(self) -> int:
        return int(self.genesis.get("initial_height") or 1)

    @property
    def consensus_params(self) -> dict:
        recorded = self.blockstore.init_chain
        return recorded["consensus_params"] if recorded else self.genesis["consensus_params"]

    # ------------------------------------------------------------------------------------ main loop

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, handshake, make blocks; on a lost app, reconnect and handshake again. Until `stop`."""
        watcher: asyncio.Future | None = None
        while not stop.is_set():
            try:
                self.client = await _until_stopped(AbciClient.connect_with_retry(self.config.proxy_app, stop), stop)
                if self.client is None:
                    return
                if not await _finish_unless_stopped(self.handshake(self.client), stop, grace=0.0):
                    return  # stopped mid-replay: every replayed block was committed, the rest waits
                self.connected.set()
                watcher = asyncio.ensure_future(self._watch_mempool_connection(self.client, stop))
                await self._wait_for_genesis_time(stop)
                log.info("handshake done: app at height %d, producing blocks every %.2fs", self.blockstore.last_height, self.config.block_interval)
                while not stop.is_set():
                    if not await _finish_unless_stopped(self.produce_block(self.client), stop):
                        return
                    await _sleep_or_stop(self.config.block_interval, stop)
            except AppConnectionLost as exc:
                log.warning("lost the app (%s); waiting for it to come back", exc)
                await _sleep_or_stop(self.config.reconnect_interval, stop)
            finally:
                self.connected.clear()
                if watcher is not None:
                    watcher.cancel()
                    watcher = None
                if self.client is not None:
                    await self.client.close()
                    self.client = None

    async def _wait_for_genesis_time(self, stop: asyncio.Event) -> None:
        """Like CometBFT, make no block before the genesis time (a localnet may set it in the future)."""
        if self.blockstore.last_height:
            return
        delay = (parse_time(self.genesis["genesis_time"]) - time.time_ns()) / 1e9
        if delay > 0:
            log.info("genesis time is %.1fs away; waiting for it", delay)
            await _sleep_or_stop(delay, stop)

    # ------------------------------------------------------------------------------------ handshake

    async def handshake(self, client: AbciClient) -> None:
        info = await client.info(
            types_pb2.RequestInfo(
                version=COMETBFT_VERSION,
                block_version=BLOCK_PROTOCOL_VERSION,
                p2p_version=P2P_PROTOCOL_VERSION,
                abci_version=ABCI_VERSION,
            )
        )
        self.app_version = info.app_version
        app_height, app_hash = info.last_block_height, info.last_block_app_hash
        store_height = self.blockstore.last_height
        log.info("handshake: app height %d hash %s, block store height %d", app_height, app_hash.hex()[:12].upper(), store_height)
        if app_height > store_height:
            raise HandshakeError(
                f"the app is at height {app_height} but the engine's block store ends at {store_height}: "
                "the app's data belongs to another chain or the block store was lost; reset one of them"
            )
        if app_height == 0:
            await self._init_chain(client)
        else:
            expected = self.blockstore.app_hash_after(app_height)
            if expected is None or expected != app_hash:
                raise HandshakeError(
                    f"app hash mismatch at height {app_height}: app has {app_hash.hex().upper()}, "
                    f"block store recorded {(expected or b'').hex().upper()}"
                )
        first = max(app_height + 1, self.initial_height)
        for height in range(first, store_height + 1):
            await self._replay(client, height)
        if store_height >= first:
            log.info("replayed blocks %d..%d into the app", first, store_height)
        self.visible_height = store_height
        self.metrics.at_height(store_height)
        async with self.mempool.lock:
            dropped = await self._recheck_mempool(client)
        if dropped:
            log.info("re-check after handshake dropped %d txs", dropped)

    # --------------------------------------------------------------------------- mempool connection

    async def _recheck_mempool(self, client: AbciClient) -> int:
        """Re-check every waiting tx (the caller holds the mempool lock), re-opening the mempool connection
        first if it failed and again whenever it fails on the way. Each round either finishes or drops the tx
        the app answered with an exception; rounds that make no progress are bounded. Returns the txs dropped.
        AppConnectionLost if the app cannot be reached."""
        dropped, idle_rounds = 0, 0
        while True:
            if client.mempool_down:
                await client.reopen_mempool()
                # Only the app this session handshook may re-check: if it died and another took its socket,
                # that one may be behind the block store, and the re-check would drop good txs. The query
                # connection belongs to the handshaken app; an answer on it means that app still listens.
                await client.echo("mempool connection re-opened")
            before = len(self.mempool)
            try:
                return dropped + await self.mempool.recheck(client.recheck_txs)
            except AppConnectionLost as exc:
                dropped += before - len(self.mempool)
                idle_rounds = 0 if len(self.mempool) < before else idle_rounds + 1
                if idle_rounds >= MEMPOOL_RECHECK_ATTEMPTS:
                    raise
                log.warning("the mempool connection failed during a re-check (%s); re-opening it", exc)

    async def ensure_mempool_connection(self, client: AbciClient) -> None:
        """If the mempool connection failed, re-open it and re-check the waiting txs (caller holds the lock)."""
        if client.mempool_down:
            log.warning("the mempool connection failed (%s); re-opening it", client.mempool_down)
            dropped = await self._recheck_mempool(client)
            log.info("mempool connection healed; the re-check kept %d txs and dropped %d", len(self.mempool), dropped)

    async def _watch_mempool_connection(self, client: AbciClient, stop: asyncio.Event) -> None:
        """Heal the mempool connection as soon as it fails, so the waiting txs are re-checked without waiting
        for a new CheckTx or the next block. If the app cannot be reached, try again after a pause; the block
        loop finds out on its own if the whole app is gone."""
        while not stop.is_set():
            await client.wait_mempool_down()
            try:
                async with self.mempool.lock:
                    await self.ensure_mempool_connection(client)
            except AppConnectionLost as exc:
                log.warning("cannot re-open the mempool connection yet: %s", exc)
                await _sleep_or_stop(self.config.reconnect_interval, stop)

    async def _init_chain(self, client: AbciClient) -> None:
        request = init_chain_request(self.genesis, self.home.paths.genesis.read_text())
        response = await client.init_chain(request)
        validators = genesis_validators(self.genesis)
        if response.validators:
            validators = apply_validator_updates([], response.validators)
        if not validators:
            raise HandshakeError("no validators: genesis.json lists none and InitChain returned none")
        params = self.genesis["consensus_params"]
        if response.HasField("consensus_params"):
            params = merge_params(params, response.consensus_params)
        app_hash = response.app_hash
        recorded = self.blockstore.init_chain
        if recorded is not None and self.blockstore.last_height > 0:
            # A fresh app under an existing chain: its genesis must be the one the stored blocks grew from.
            if bytes.fromhex(recorded["app_hash"]) != app_hash:
                raise HandshakeError(
                    f"InitChain returned app hash {app_hash.hex().upper()}, but the stored chain began from "
                    f"{recorded['app_hash'].upper()}: the genesis changed"
                )
            return
        self.blockstore.save_init_chain(self.initial_height, app_hash, params, validators)
        log.info("InitChain: chain %s, %d validator(s), app hash %s", self.chain_id, len(validators), app_hash.hex()[:12].upper() or "(empty)")

    async def _replay(self, client: AbciClient, height: int) -> None:
        request = self.blockstore.request(height)
        response = await client.finalize_block(request)
        expected = self.blockstore.app_hash_after(height)
        if response.app_hash != expected:
            raise HandshakeError(
                f"replaying block {height} gave app hash {response.app_hash.hex().upper()}, "
                f"but {expected.hex().upper()} was recorded: the app is not deterministic"
            )
        await client.commit()

    # ---------------------------------------------------------------------------------- block loop

    async def produce_block(self, client: AbciClient) -> StoredBlock | None:
        """One height, in CometBFT's order: propose, check the proposal, finalize and store, commit, publish.
        None when the app rejected its own proposal (the caller proposes again)."""
        frame = self._block_frame()
        proposal = await self._propose(client, frame)
        if proposal is None:
            return None
        await self._extend_vote(client, frame, proposal)
        block, response = await self._finalize_and_store(client, frame, proposal)
        dropped = await self._commit(client, frame.height, proposal.txs)
        self.metrics.block_committed(frame.height, len(proposal.txs), len(self.mempool))
        await self._reached("after_commit", frame.height, _has_client_txs(proposal.txs))
        _log_block(block, response, dropped)
        blocks.publish(self.events, block, response)
        return block

    def _block_frame(self) -> "_BlockFrame":
        """What the next height is built on: its time (after the previous block's), validator sets, consensus
        params and the proposer's last commit."""
        store = self.blockstore
        height = store.last_height + 1 if store.last_height else self.initial_height
        previous = store.block(height - 1) if height > self.initial_height else None
        floor = previous.time_ns + 1_000_000 if previous else parse_time(self.genesis["genesis_time"])
        time_ns = max(time.time_ns(), floor)
        validators = store.validators(height)
        next_validators = store.validators(height + 1)
        if validators is None or next_validators is None:
            raise EngineError(f"no validator set recorded for height {height}")
        votes, last_commit = blocks.last_commit(store, self._key, self.chain_id, height, previous, time_ns)
        return _BlockFrame(height, previous, time_ns, validators, next_validators, self.consensus_params, votes,
                           last_commit, hashing.validators_hash(next_validators))

    async def _propose(self, client: AbciClient, frame: "_BlockFrame") -> "_Proposal | None":
        """PrepareProposal over the mempool, the header, then ProcessProposal; None if the app rejects it."""
        max_bytes = max_data_bytes(frame.params, len(frame.validators))
        proposer = self._key.address
        prepared = await client.prepare_proposal(
            types_pb2.RequestPrepareProposal(
                max_tx_bytes=max_bytes,
                txs=self.mempool.reap(max_bytes),
                local_last_commit=types_pb2.ExtendedCommitInfo(round=0, votes=self._extended_votes(frame)),
                height=frame.height,
                time=timestamp(frame.time_ns),
                next_validators_hash=frame.next_validators_hash,
                proposer_address=proposer,
            )
        )
        txs = list(prepared.txs)
        header = blocks.header(
            self.blockstore, self.chain_id, self.app_version, proposer, frame.height, frame.time_ns, frame.previous,
            txs, frame.last_commit, frame.validators, frame.next_validators, frame.params,
        )
        block_hash = hashing.header_hash(header)
        commit_info = types_pb2.CommitInfo(round=0, votes=frame.votes)
        process = await client.process_proposal(
            types_pb2.RequestProcessProposal(
                txs=txs,
                proposed_last_commit=commit_info,
                hash=block_hash,
                height=frame.height,
                time=timestamp(frame.time_ns),
                next_validators_hash=frame.next_validators_hash,
                proposer_address=proposer,
            )
        )
        if process.status != types_pb2.ResponseProcessProposal.ACCEPT:
            # CometBFT would move to the next round; with one validator that means proposing again.
            log.error("the app rejected its own proposal at height %d (status %d); proposing again", frame.height,
                      process.status)
            return None
        return _Proposal(txs, header, block_hash, commit_info)

    def _extended_votes(self, frame: "_BlockFrame") -> list:
        """The last commit's votes, this validator's with the extension it signed for the previous height."""
        extension = self._extension if self._extension and self._extension[0] == frame.height - 1 else None
        votes = []
        for vote in frame.votes:
            extended = types_pb2.ExtendedVoteInfo(validator=vote.validator, block_id_flag=vote.block_id_flag)
            if extension is not None and vote.validator.address == self._key.address:
                extended.vote_extension, extended.extension_signature = extension[1], extension[2]
            votes.append(extended)
        return votes

    async def _extend_vote(self, client: AbciClient, frame: "_BlockFrame", proposal: "_Proposal") -> None:
        """ExtendVote for the accepted proposal, when the consensus params enable extensions at its height."""
        enabled = int(frame.params.get("abci", {}).get("vote_extensions_enable_height", 0) or 0)
        if not 0 < enabled <= frame.height:
            return
        response = await client.extend_vote(types_pb2.RequestExtendVote(
            hash=proposal.block_hash, height=frame.height, time=timestamp(frame.time_ns), txs=proposal.txs,
            proposed_last_commit=proposal.commit_info, next_validators_hash=frame.next_validators_hash,
            proposer_address=self._key.address))
        extension = bytes(response.vote_extension)
        signature = self._key.private_key.sign(extension_sign_bytes(self.chain_id, frame.height, 0, extension))
        self._extension = (frame.height, extension, signature)

    async def _finalize_and_store(self, client: AbciClient, frame: "_BlockFrame", proposal: "_Proposal"
                                  ) -> tuple[StoredBlock, types_pb2.ResponseFinalizeBlock]:
        """FinalizeBlock, then the block, its results and the next validator sets in one stored batch: from
        here on the block is decided."""
        txs = proposal.txs
        request = types_pb2.RequestFinalizeBlock(
            txs=txs,
            decided_last_commit=proposal.commit_info,
            hash=proposal.block_hash,
            height=frame.height,
            time=timestamp(frame.time_ns),
            next_validators_hash=frame.next_validators_hash,
            proposer_address=self._key.address,
        )
        await self._reached("before_finalize", frame.height, _has_client_txs(txs))
        response = await client.finalize_block(request)
        if len(response.tx_results) != len(txs):
            raise EngineError(f"FinalizeBlock returned {len(response.tx_results)} results for {len(txs)} txs")
        params = frame.params
        if response.HasField("consensus_param_updates"):
            params = merge_params(params, response.consensus_param_updates)
        block = StoredBlock(
            height=frame.height,
            time_ns=frame.time_ns,
            block_hash=proposal.block_hash,
            header=proposal.header,
            block_id=blocks.block_id(proposal.block_hash),
            txs=tuple(txs),
            last_commit=frame.last_commit,
        )
        after_next = apply_validator_updates(frame.next_validators, response.validator_updates)
        updated_params = params if response.HasField("consensus_param_updates") else None
        # A synced LevelDB write takes milliseconds; off the event loop, the RPC keeps answering meanwhile.
        await asyncio.to_thread(self.blockstore.save_block, block, request, response, after_next, updated_params)
        await self._reached("after_finalize", frame.height, _has_client_txs(txs))
        return block, response

    async def _commit(self, client: AbciClient, height: int, txs: list[bytes]) -> int:
        """Commit with the mempool held, then drop the block's txs and re-check the rest; returns how many the
        re-check dropped."""
        async with self.mempool.lock:
            # As CometBFT: no CheckTx may be in flight across Commit, and none starts until re-check ends.
            # A failed mempool connection has nothing in flight; the re-check below re-opens it.
            if not client.mempool_down:
                try:
                    await client.flush_mempool_connection()
                except AppConnectionLost:
                    if not client.mempool_down:
                        raise
            try:
                await client.commit()
            except BaseException:
                self.mempool.remove_committed(txs)  # decided (stored) even if the app died: never propose again
                raise
            # Both at once (no await between): a client never sees the txs leave the mempool before the
            # block that carries them is visible.
            self.visible_height = height
            self.mempool.remove_committed(txs)
            return await self._recheck_mempool(client)

    async def _reached(self, step: str, height: int, has_txs: bool) -> None:
        if self._observer is not None:
            await self._observer.reached(step, height, has_txs)


def _has_client_txs(txs: list[bytes]) -> bool:
    return any(not is_seed_tx(tx) for tx in txs)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except asyncio.TimeoutError:
        pass


STOP_GRACE_SECONDS = 5.0
"""How long a stop waits for the block in progress before abandoning it (the handshake repairs either way)."""


async def _finish_unless_stopped(coroutine, stop: asyncio.Event, grace: float = STOP_GRACE_SECONDS) -> bool:
    """Run one step; if `stop` comes meanwhile, give it `grace` seconds, then cancel. True if it finished."""
    task = asyncio.ensure_future(coroutine)
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task not in done:
        done, _ = await asyncio.wait({task}, timeout=grace) if grace > 0 else (set(), None)
        if task not in done:
            log.warning("stopping in the middle of a step; the next start's handshake completes it")
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, AppConnectionLost):
                pass
            return False
    task.result()
    return True


async def _until_stopped(coroutine, stop: asyncio.Event):
    """Await `coroutine` unless `stop` is set first (then cancel it and return None)."""
    task = asyncio.ensure_future(coroutine)
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, AppConnectionLost):
        pass
    return None


@dataclass(frozen=True)
class _BlockFrame:
    """The inputs of one height, fixed before the app is asked anything."""

    height: int
    previous: StoredBlock | None
    time_ns: int
    validators: list
    next_validators: list
    params: object
    votes: list
    last_commit: object
    next_validators_hash: bytes


@dataclass(frozen=True)
class _Proposal:
    """The block the app prepared and accepted: its txs, header, hash and the commit info it carries."""

    txs: list[bytes]
    header: object
    block_hash: bytes
    commit_info: types_pb2.CommitInfo


def _log_block(block: StoredBlock, response: types_pb2.ResponseFinalizeBlock, dropped: int) -> None:
    failed = sum(1 for r in response.tx_results if r.code != 0)
    log.info(
        "block %d: %d txs%s, app hash %s, %s%s",
        block.height,
        len(block.txs),
        f" ({failed} failed)" if failed else "",
        response.app_hash.hex()[:12].upper(),
        format_time(block.time_ns),
        f", re-check dropped {dropped}" if dropped else "",
    )
