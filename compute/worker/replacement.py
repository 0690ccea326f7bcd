"""Joining a running task as a replacement (docs/protocol.md 4.1c), in the order that risks nothing.

A member who left a running task leaves its slot open from the next round; a worker may join into it and trains
from the round after the one it joined in. Before it sends `JoinTask` and locks collateral, it must know it can
start that round, so it gets, in this order:

1. the task's dataset, from the spec's URLs and from the members (each serves the dataset it trains on,
   itself or through its relay), with the one dataset fetcher (`compute/data/fetch.py`): only the shards its
   store lacks, each kept as it arrives, so an interrupted fetch resumes where it stopped
   (`fetch_dataset_from_members`); the fit check that follows finds it in the store;
2. the current round's start weights W_r, derived by the task's one weights follower (the code every worker
   and verifier uses) from W_0 and every passed update so far, fetched by hash from any member into the store
   (`derive_current_start`). One that cannot be derived raises `StartUnavailable`: the worker does not join,
   so it never locks collateral for a round it could not start.

After joining it waits for its first round, mirroring the current round's updates (`plan.decide`), and derives
W_{first round} from what it keeps, without anyone waiting for it.
"""

from __future__ import annotations

import hashlib
import logging
import shutil

from trolly.wallet.market_views import TaskView

from ..blobs import AddressPolicy, BlobError, BlobStore
from ..data.fetch import DatasetFetcher, dataset_urls, missing_bytes
from ..data.manifest import manifest_shape
from ..errors import DatasetError
from ..outer_step import GlobalState
from ..spec import TaskSpec, parse_spec
from ..weights_follower import WeightsFollower
from .data import read_manifest
from .errors import TaskUnfit
from .fit import check_disk

log = logging.getLogger("trolly.worker")


async def fetch_dataset_from_members(store: BlobStore, spec: TaskSpec, view: TaskView,
                                     addresses: AddressPolicy) -> int:
    """Fetch the manifest and the shards the store lacks from the spec's URLs and the members' (`dataset_urls`:
    every blob hash-checked and kept as it arrives); returns how many shards were fetched. A bundled dataset is
    built locally instead and fetches nothing. Raises TaskUnfit when the manifest exceeds the spec's bounds or
    the shards this machine's disk, DatasetError or BlobError when the sources do not serve it."""
    if not spec.dataset.packed:
        return 0
    fetcher = DatasetFetcher.for_task(spec, dataset_urls(spec, view), addresses)
    manifest = await fetcher.manifest(store)
    check_disk(missing_bytes(store, manifest), shutil.disk_usage(store.root).free)
    return await fetcher.into_store(store)


async def derive_current_start(store: BlobStore, spec: TaskSpec, view: TaskView,
                               addresses: AddressPolicy) -> GlobalState:
    """W_r of the task's current round r, derived by a weights follower whose fetched updates stay in `store`
    (the worker's own follower finds them there after it joined); raises StartUnavailable when a passed update
    is served by nobody."""
    manifest = await read_manifest(store, spec, addresses)
    follower = WeightsFollower(spec, manifest_shape(manifest), addresses, store=store)
    return await follower.state(view.round, view)


async def prepare_replacement(market, store: BlobStore, task_id: int, spec_hash: str,
                              addresses: AddressPolicy) -> None:
    """Steps 1 and 2 of the module docstring for a running task, before `JoinTask` (`market`: the worker's
    `MarketClient`); raises TaskUnfit when the spec or the dataset cannot be had (as for an open task) and
    StartUnavailable when the start weights cannot."""
    raw = await market.spec(task_id)
    if hashlib.sha256(raw).hexdigest() != spec_hash:
        raise TaskUnfit("the spec does not match its hash on chain")
    spec, view = parse_spec(raw), await market.task(task_id)
    try:
        fetched = await fetch_dataset_from_members(store, spec, view, addresses)
    except (DatasetError, BlobError) as error:
        raise TaskUnfit(f"the task's dataset cannot be obtained from its URLs or members: {error}") from None
    if fetched:
        log.info("task %d: fetched %d dataset shard(s) from its URLs and members", task_id, fetched)
    start = await derive_current_start(store, spec, view, addresses)
    log.info("task %d: derived W_%d (%s) before joining as a replacement", task_id, view.round,
             start.weights_hash().hex()[:12])
