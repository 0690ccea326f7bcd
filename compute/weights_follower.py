"""One follower of a task's global weights W_0, W_1, ..., W_R, derived from what it has checked itself.

    W_0      `initial_weights(spec, shape)`: a pure function of the spec (architecture, config, seed)
    W_{r+1}  `aggregate_round(W_r, the updates of round r that PASSED verification)`: decoded, then the outer
             step weighted by samples processed (`compute/outer_step.py`, bit for bit the same in every process)

The worker (the start of each round it trains, and its final report), the verifier (the start every member
of a round must have committed) and the demo's observer all follow a task with a `WeightsFollower`, so that
they cannot disagree about a round's start. The follower never adopts a start: where an update of round r
cannot be had from anyone, `state(r + 1)` raises `StartUnavailable` and the caller decides what that means
(a worker retries, a verifier cannot vote on that round's start). The chain's agreed hash is only compared
with (`disagreement`), never used in place of a derived state.

An update is content-addressed: it is fetched from the member that made it or from any other member (every
worker keeps a copy of each update of the round it just committed to, `mirror`, because the maker may be gone
by the time the next round starts), and every byte is checked against the committed hash. A `StateCache`
keeps each derived state, so W_r is computed once: on disk for a long-running process (`DirectoryCache`), in
the worker's blob store with its progress (`compute/worker/service.py`), in memory otherwise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from trolly.chain.market.records import PASSED
from trolly.wallet.files import write_atomically
from trolly.wallet.market_views import TaskView

from .blobs import AddressPolicy, BlobClient, BlobError, BlobStore, RetryPolicy
from .errors import ComputeError
from .models import DataShape
from .outer_step import GlobalState, aggregate_round
from .spec import TaskSpec
from .training import initial_weights

log = logging.getLogger("trolly.weights")

FETCH_RETRY = RetryPolicy(attempts=2, initial_delay=0.2, request_timeout=30.0)


@dataclasses.dataclass(frozen=True)
class RoundUpdate:
    """One member's committed update of a round, as the aggregation needs it: who made it, where it is served,
    what it weighs and whether verification passed it."""

    worker: str
    worker_index: int
    update_hash: str
    samples_processed: int
    outcome: str
    blob_url: str


def round_updates(view: TaskView, round_index: int) -> list[RoundUpdate]:
    """Every training commitment of a round with its member's index and blob URL, in worker-index order (the
    final report's round carries none)."""
    detail = view.round_detail(round_index)
    if detail is None or detail.final_report:
        return []
    members = {m.worker: m for m in view.members}
    updates = [
        RoundUpdate(worker=c.worker, worker_index=members[c.worker].index, update_hash=c.update_hash,
                    samples_processed=c.samples_processed, outcome=c.outcome, blob_url=members[c.worker].fetch_url)
        for c in detail.commitments if c.worker in members and c.update_hash
    ]
    return sorted(updates, key=lambda u: u.worker_index)


def agreed_start_hash(view: TaskView, round_index: int) -> str:
    """The start weights hash the chain recorded for a closed round ('' while it has none)."""
    detail = view.round_detail(round_index)
    return detail.start_weights_hash if detail else ""


class StartUnavailable(ComputeError):
    """A round's start cannot be derived: a passed update of the round before it is served by nobody, or the
    round is not on chain yet."""

    def __init__(self, round_index: int, reason: str, missing: Sequence[str] = ()) -> None:
        super().__init__(f"cannot derive W_{round_index}: {reason}")
        self.round = round_index
        self.missing = tuple(missing)


class StateCache(Protocol):
    """Where a follower keeps the states it derived."""

    def load(self, round_index: int) -> GlobalState | None: ...

    def save(self, state: GlobalState) -> None: ...


class MemoryCache:
    """States kept for the life of the process."""

    def __init__(self) -> None:
        self._states: dict[int, GlobalState] = {}

    def load(self, round_index: int) -> GlobalState | None:
        return self._states.get(round_index)

    def save(self, state: GlobalState) -> None:
        self._states[state.round] = state


class DirectoryCache(MemoryCache):
    """States kept in memory and as `round-<r>.state` files in a directory, so a restart does not refetch a
    task's history; a damaged file is deleted and its state derived again, never trusted."""

    def __init__(self, directory: pathlib.Path) -> None:
        super().__init__()
        self.directory = directory

    def load(self, round_index: int) -> GlobalState | None:
        state = super().load(round_index)
        path = self.directory / f"round-{round_index}.state"
        if state is None and path.exists():
            try:
                state = GlobalState.decode(path.read_bytes())
            except ComputeError:
                path.unlink()
                return None
            super().save(state)
        return state

    def save(self, state: GlobalState) -> None:
        super().save(state)
        write_atomically(self.directory / f"round-{state.round}.state", state.encode())


class WeightsFollower:
    """W_r of one task, derived round after round from W_0 and the passed updates, fetched by hash.

    `store`: where fetched updates are kept (a worker serves its mirror from it); None keeps them only while a
    state is derived. `cache`: where derived states are kept (in memory by default)."""

    def __init__(self, spec: TaskSpec, shape: DataShape, addresses: AddressPolicy, *, store: BlobStore | None = None,
                 cache: StateCache | None = None, retry: RetryPolicy = FETCH_RETRY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.shape = shape
        self.addresses = addresses
        self.store = store
        self.cache = cache if cache is not None else MemoryCache()
        self.retry = retry
        self.clock = clock
        self.failures: dict[str, int] = {}
        """Per update hash nobody served: how many mirror attempts failed in a row."""
        self.next_try: dict[str, float] = {}
        """Per update hash nobody served: when `mirror` tries it again (1 s, doubling to 30 s)."""

    # ---- states ---------------------------------------------------------------------------------------------

    def initial(self) -> GlobalState:
        """W_0, from the spec alone."""
        state = self.cache.load(0)
        if state is None:
            state = GlobalState.initial(initial_weights(self.spec, self.shape))
            self.cache.save(state)
        return state

    async def state(self, round_index: int, view: TaskView) -> GlobalState:
        """W_round (and its outer momentum), deriving every round not cached yet from the passed updates that
        `view` lists; raises StartUnavailable when one cannot be fetched from any member."""
        known = next(r for r in range(round_index, -1, -1) if r == 0 or self.cache.load(r) is not None)
        state = self.cache.load(known) if known else await asyncio.to_thread(self.initial)
        for r in range(known, round_index):
            if view.round_detail(r) is None:
                raise StartUnavailable(r + 1, f"round {r} is not on chain")
            passed = [u for u in round_updates(view, r) if u.outcome == PASSED]
            encoded = await self._fetch_all(passed, round_updates(view, r), r + 1)
            # in a thread: a worker's blob service shares this event loop, and peers fetch from it meanwhile
            state = await asyncio.to_thread(self._aggregate, state, passed, encoded)
            self.cache.save(state)
        return state

    def _aggregate(self, previous: GlobalState, passed: Sequence[RoundUpdate], encoded: Sequence[bytes]) -> GlobalState:
        try:
            return aggregate_round(previous, [(u.worker_index, u.samples_processed, data)
                                              for u, data in zip(passed, encoded, strict=True)], self.spec)
        except ComputeError as error:
            raise StartUnavailable(previous.round + 1, f"round {previous.round}'s updates do not aggregate: {error}")

    def disagreement(self, state: GlobalState, view: TaskView) -> str:
        """Why the chain's recorded start of `state.round` is not `state` ('' when it is, or has none yet)."""
        agreed = agreed_start_hash(view, state.round)
        ours = state.weights_hash().hex()
        if agreed and agreed != ours:
            return f"round {state.round}: the chain recorded start weights {agreed}, derived here {ours}"
        return ""

    # ---- updates --------------------------------------------------------------------------------------------

    async def _fetch_all(self, wanted: Sequence[RoundUpdate], members: Sequence[RoundUpdate],
                         round_index: int) -> list[bytes]:
        encoded, missing = [], []
        for update in wanted:
            data = await self._fetch(update, members)
            if data is None:
                missing.append(update.update_hash)
            encoded.append(data)
        if missing:
            raise StartUnavailable(round_index, f"{len(missing)} passed update(s) of round {round_index - 1} are "
                                                f"served by no member", missing)
        return encoded

    async def _fetch(self, update: RoundUpdate, members: Sequence[RoundUpdate]) -> bytes | None:
        """The update's bytes from the store, else from its maker or any other member (hash-checked)."""
        if self.store is not None and self.store.has(update.update_hash):
            return self.store.get(update.update_hash)
        urls = sorted({u.blob_url for u in members if u.blob_url})
        sources = [url for url in [update.blob_url] + [u for u in urls if u != update.blob_url] if url]
        try:
            async with BlobClient(sources, retry=self.retry, address_policy=self.addresses) as client:
                data = await client.fetch(update.update_hash)
        except BlobError as error:
            log.debug("update %s of worker %d not fetched: %s", update.update_hash[:12], update.worker_index, error)
            return None
        if self.store is not None:
            self.store.put(data, expected=update.update_hash)
        return data

    async def mirror(self, updates: Sequence[RoundUpdate]) -> list[str]:
        """Keep a copy of every update of `updates` in the store (a worker does this while a round is being
        verified, so it can serve the updates if their makers leave); returns the hashes still missing. One
        nobody served is tried again after a growing pause (1 s doubling to 30 s), with one warning."""
        now = self.clock()
        missing = []
        for update in updates:
            if self.store is None or self.store.has(update.update_hash):
                continue
            if self.next_try.get(update.update_hash, 0.0) > now:
                missing.append(update.update_hash)
                continue
            if await self._fetch(update, updates) is not None:
                self.failures.pop(update.update_hash, None)
                self.next_try.pop(update.update_hash, None)
                continue
            missing.append(update.update_hash)
            count = self.failures[update.update_hash] = self.failures.get(update.update_hash, 0) + 1
            self.next_try[update.update_hash] = now + min(2.0 ** (count - 1), 30.0)
            if count == 1:
                log.warning("update %s of worker %d cannot be fetched from any member yet; will keep trying",
                            update.update_hash[:12], update.worker_index)
        return missing
