"""The mempool: transactions the app admitted with CheckTx, in arrival order, waiting for a block.

As in CometBFT: a tx is admitted only if CheckTx returns code 0; a cache of recently seen tx hashes refuses
duplicates ("tx already exists in cache"), and a tx that failed CheckTx leaves the cache so it can be retried;
the proposer reaps txs in order up to the block's byte budget; after every Commit the txs of the block are
removed and the rest re-checked (CheckTx type RECHECK), dropping those that became invalid. The lock is held
from before Commit until the re-check is over, so no new CheckTx sees a half-updated app. The same re-check
runs when the mempool connection had to be re-opened: a tx the app answers with an exception is dropped, and
one left unanswered because the connection failed stays for the next re-check.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging

from . import AppConnectionLost, EngineError

log = logging.getLogger("trolly.engine.mempool")


class MempoolError(EngineError):
    """A transaction could not enter the mempool (duplicate, full, too large)."""


class Mempool:
    def __init__(self, max_txs: int = 5000, max_bytes: int = 1 << 30, max_tx_bytes: int = 1 << 20, cache_size: int = 10000) -> None:
        self.max_txs = max_txs
        self.max_bytes = max_bytes
        self.max_tx_bytes = max_tx_bytes
        self.cache_size = cache_size
        self.lock = asyncio.Lock()
        self._txs: dict[bytes, bytes] = {}  # hash -> tx, insertion order = arrival order
        self._bytes = 0
        self._cache: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._txs)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def txs(self, limit: int | None = None) -> list[bytes]:
        values = list(self._txs.values())
        return values if limit is None else values[:limit]

    def _remember(self, tx_hash: bytes) -> None:
        self._cache[tx_hash] = None
        self._cache.move_to_end(tx_hash)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def check_and_add(self, tx: bytes, send_check, reconnect=None) -> object:
        """Admit `tx` if the app's CheckTx returns code 0; returns the CheckTx response.

        `send_check(tx, on_response)` queues the CheckTx on the mempool connection and returns a future.
        The lock is held only while queueing, so many CheckTxs are in flight at once; the admission itself
        happens in `on_response`, in the order the app answered, which is the order the txs were sent.
        `reconnect()`, if given, is awaited under the lock first: it re-opens a failed mempool connection and
        re-checks the waiting txs on it, so that they are checked before this new one.
        """
        if len(tx) > self.max_tx_bytes:
            raise MempoolError(f"tx too large. Max size is {self.max_tx_bytes}, but got {len(tx)}")
        tx_hash = hashlib.sha256(tx).digest()
        async with self.lock:
            if tx_hash in self._cache:
                raise MempoolError("tx already exists in cache")
            if len(self._txs) >= self.max_txs or self._bytes + len(tx) > self.max_bytes:
                raise MempoolError(
                    f"mempool is full: number of txs {len(self._txs)} (max: {self.max_txs}), "
                    f"total txs bytes {self._bytes} (max: {self.max_bytes})"
                )
            if reconnect is not None:
                await reconnect()
            self._remember(tx_hash)
            try:
                answered = send_check(tx, lambda response: self._admit(tx_hash, tx, response))
            except BaseException:
                self._cache.pop(tx_hash, None)
                raise
        try:
            return await answered
        except EngineError:
            # The app went away before answering: forget the tx so the client can send it again.
            if tx_hash not in self._txs:
                self._cache.pop(tx_hash, None)
            raise

    def _admit(self, tx_hash: bytes, tx: bytes, response) -> None:
        if response.code == 0 and tx_hash not in self._txs:
            self._txs[tx_hash] = tx
            self._bytes += len(tx)
        elif response.code != 0:
            self._cache.pop(tx_hash, None)

    def reap(self, max_bytes: int) -> list[bytes]:
        """Txs in arrival order while their total stays within `max_bytes` (CometBFT `ReapMaxBytesMaxGas`)."""
        selected, total = [], 0
        for tx in self._txs.values():
            if total + len(tx) > max_bytes:
                break
            selected.append(tx)
            total += len(tx)
        return selected

    def remove_committed(self, txs: list[bytes]) -> None:
        """Drop a decided block's txs; they stay in the cache so a re-broadcast is refused."""
        for tx in txs:
            tx_hash = hashlib.sha256(tx).digest()
            self._remember(tx_hash)
            removed = self._txs.pop(tx_hash, None)
            if removed is not None:
                self._bytes -= len(removed)

    async def recheck(self, check_all) -> int:
        """Re-run CheckTx (RECHECK) on every remaining tx, in order; drop the failures. Caller holds the lock.

        `check_all(txs)` returns one outcome per tx, in order (the client pipelines them): a response (dropped
        unless its code is 0), another exception (the app answered that tx with an exception: dropped), or
        `AppConnectionLost` (the connection failed before that tx was answered). At the first lost one the
        re-check stops, with what came before it applied, and raises it: the caller re-opens the connection
        and re-checks again. Returns how many txs were dropped."""
        entries = list(self._txs.items())
        outcomes = await check_all([tx for _, tx in entries]) if entries else []
        dropped = 0
        for (tx_hash, tx), outcome in zip(entries, outcomes):
            if isinstance(outcome, AppConnectionLost):
                raise outcome
            if isinstance(outcome, BaseException):
                log.warning("recheck dropped tx %s: %s", tx_hash.hex().upper(), outcome)
            elif outcome.code != 0:
                log.debug("recheck dropped tx %s: code %d %s", tx_hash.hex().upper(), outcome.code, outcome.log)
            else:
                continue
            del self._txs[tx_hash]
            self._cache.pop(tx_hash, None)
            self._bytes -= len(tx)
            dropped += 1
        return dropped
