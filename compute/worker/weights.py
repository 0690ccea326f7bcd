"""The global weights W_r every member of a task starts round r from, and how a worker gets them.

    W_0      `initial_weights(spec)`: a pure function of the spec (architecture, config, seed)
    W_{r+1}  `outer_step(W_r, the updates of round r that PASSED verification)`, weighted by samples
             (`compute/rounds.py`, bit for bit the same in every process)

An update blob is fetched from the worker that made it, or from any other member: every worker keeps a copy
of each update of the round it just committed to (`mirror_updates`, run while verification is going on),
because its maker may be gone by the time the next round starts, and all blobs are content-addressed, so a
copy from anywhere is as good as the original.

The chain publishes, once round r closes, the start weights hash its members agreed on; a worker checks its
own W_r against it (`check_agreed`), so a divergence is reported plainly instead of as a lost round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ..blobs import AddressPolicy, BlobClient, BlobError, BlobStore, RetryPolicy
from ..codecs import get_codec
from ..models import DataShape
from ..rounds import GlobalState, WorkerUpdate, outer_step
from ..spec import TaskSpec
from ..training import initial_weights
from .errors import WeightsMismatch
from .plan import PASSED, CommittedUpdate

log = logging.getLogger("trolly.worker")


def initial_state(spec: TaskSpec, shape: DataShape) -> GlobalState:
    return GlobalState.initial(initial_weights(spec, shape))


def next_state(spec: TaskSpec, state: GlobalState, updates: Sequence[CommittedUpdate], store: BlobStore) -> GlobalState:
    """W_{state.round + 1} from the round's commitments; every PASSED update must be in `store`."""
    codec = get_codec(spec.codec)
    decoded = []
    for update in updates:
        if update.outcome != PASSED:
            continue
        if not store.has(update.update_hash):
            raise WeightsMismatch(f"update {update.update_hash} of worker {update.worker_index} is not available")
        decoded.append(WorkerUpdate(update.worker_index, update.samples_processed,
                                    codec.decode(store.get(update.update_hash))))
    return outer_step(state, decoded, spec.training.outer_optimizer)


def check_agreed(state: GlobalState, agreed_hash: str) -> None:
    """Raise WeightsMismatch when the chain agreed on other start weights for this round."""
    ours = state.weights_hash().hex()
    if agreed_hash and agreed_hash != ours:
        raise WeightsMismatch(f"round {state.round}: the chain agreed on start weights {agreed_hash}, "
                              f"this worker computed {ours}")


async def mirror_updates(store: BlobStore, updates: Sequence[CommittedUpdate], addresses: AddressPolicy, *,
                         only_passed: bool = False,
                         retry: RetryPolicy = RetryPolicy(attempts=2, initial_delay=0.2, request_timeout=30.0),
                         skip: Callable[[str], bool] = lambda digest: False) -> list[str]:
    """Fetch every update of `updates` missing from `store` (hash-checked) and keep it; returns the hashes
    that could not be fetched from any member (retried by the next call). `skip(hash)` leaves one out.
    Members' blob URLs are theirs to choose: connections go only where `addresses` allows."""
    urls = sorted({u.blob_url for u in updates if u.blob_url})
    missing = []
    for update in updates:
        if (only_passed and update.outcome != PASSED) or store.has(update.update_hash):
            continue
        if skip(update.update_hash):
            missing.append(update.update_hash)
            continue
        sources = [update.blob_url] + [url for url in urls if url != update.blob_url]
        try:
            async with BlobClient([s for s in sources if s], retry=retry, address_policy=addresses) as client:
                store.put(await client.fetch(update.update_hash), expected=update.update_hash)
        except BlobError as error:
            log.debug("update %s of worker %d not fetched: %s", update.update_hash[:12], update.worker_index, error)
            missing.append(update.update_hash)
    return missing


class UpdateMirror:
    """`mirror_updates` while waiting, with a growing pause (1 s doubling to 30 s) before trying an update that
    could not be fetched again, and one warning per update rather than one per look at the chain."""

    def __init__(self, store: BlobStore, addresses: AddressPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.addresses = addresses
        self.clock = clock
        self.failures: dict[str, int] = {}
        self.next_try: dict[str, float] = {}

    async def mirror(self, updates: Sequence[CommittedUpdate]) -> list[str]:
        now = self.clock()

        def skip(digest: str) -> bool:
            return self.next_try.get(digest, 0.0) > now

        attempted = {u.update_hash for u in updates if not self.store.has(u.update_hash) and not skip(u.update_hash)}
        missing = await mirror_updates(self.store, updates, self.addresses, skip=skip)
        for digest in attempted:
            if digest in missing:
                count = self.failures[digest] = self.failures.get(digest, 0) + 1
                self.next_try[digest] = now + min(2.0 ** (count - 1), 30.0)
                if count == 1:
                    worker = next(u.worker_index for u in updates if u.update_hash == digest)
                    log.warning("update %s of worker %d cannot be fetched from any member yet; will keep trying",
                                digest[:12], worker)
            else:
                self.failures.pop(digest, None)
                self.next_try.pop(digest, None)
        return missing
