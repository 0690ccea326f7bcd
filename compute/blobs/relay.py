"""A blob relay: workers with no inbound route push their blobs here; verifiers and other workers fetch them.

    PUT /workers/<worker>/blobs/<hex>                                   signed push of one blob
    PUT /workers/<worker>/tasks/<task>/rounds/<r>/checkpoints           signed push of a round's listing
    GET /workers/<worker>/blobs/<hex>                                   anyone: the bytes (any worker's path)
    GET /workers/<worker>/tasks/<task>/rounds/<r>/checkpoints           anyone: {"checkpoint_hashes": [...]}
    GET /blobs/<hex>, GET /health

A worker registers the relay's URL on chain (`relay`); fetchers then read `<relay>/workers/<worker>` as they
would the worker's own blob service (`chain.market.urls.relay_worker_url`). Validators run one beside their
verifier, and anyone may run one: it holds no key.

A push is refused, with a JSON `{"error": ...}`, when the blob's name is not a hash (400), the body does not
hash to it (400), it is over the size bound (413), the signature headers are missing or wrong, or the
signature is stale (401, `relay_auth.py`), the signer is not an active member of a live task on chain (403:
read through the node's RPC, `ChainMembers`), or the worker's share of the task or the relay is full (507,
`relay_store.py`). Fetching needs no trust in the relay: every fetcher checks each blob against the hash the
chain committed. A task settled on chain is evicted `keep_settled` seconds after the relay first sees it so
(the requester fetches the final weights in between); connections are capped as on a worker's blob service.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time

from aiohttp import web

from trolly.chain.market.records import ACTIVE, LIVE_STATUSES
from trolly.wallet.errors import QueryFailed, WalletError
from trolly.wallet.market_queries import get_task_overview
from trolly.wallet.rpc import AsyncRpcClient

from .connect_policy import AddressPolicy
from .connections import ConnectionGuard, ConnectionLimits, admitted_total
from .errors import BlobError, BlobNotFound, BlobRejected, BlobTooLarge
from .reachability import add_probe_route
from .relay_auth import DEFAULT_MAX_SKEW, PushSignatureInvalid, PushUnsigned, check_push, read_push_headers
from .relay_store import QuotaExceeded, RelayStore
from .server import LIMITS_KEY, BodyTooSlow, _error, _read_limited, _route_task, _slow_body, blob_file_response
from .store import check_blob_hash

log = logging.getLogger(__name__)

RELAY_KEY = web.AppKey("relay", "Relay")


class NotAMember(BlobRejected):
    """The signer is not an active member of a live task (HTTP 403)."""


class ChainUnreadable(BlobError):
    """The relay cannot ask the node who the task's members are (HTTP 503: the pusher retries)."""


class ChainMembers:
    """Who may push for a task: its active members while it is open or running, as the node answers.

    A positive answer is kept `ttl` seconds (a round's pushes ask once); a negative one is asked again each time,
    so a worker that has just joined is not turned away."""

    def __init__(self, client: AsyncRpcClient, ttl: float = 5.0) -> None:
        self.client = client
        self.ttl = ttl
        self._members: dict[int, tuple[float, frozenset[str]]] = {}

    async def check(self, task_id: int, worker: str) -> None:
        kept = self._members.get(task_id)
        if kept is not None and time.monotonic() - kept[0] < self.ttl and worker in kept[1]:
            return
        try:
            task = await get_task_overview(self.client, task_id)
        except QueryFailed as error:  # no such task
            raise NotAMember(f"task {task_id}: {error}") from None
        except WalletError as error:
            raise ChainUnreadable(f"cannot read task {task_id} from the node: {error}") from None
        if task.status not in LIVE_STATUSES:
            raise NotAMember(f"task {task_id} is {task.status}: the relay takes pushes for open and running tasks")
        members = frozenset(m.worker for m in task.members if m.status == ACTIVE)
        self._members[task_id] = (time.monotonic(), members)
        if worker not in members:
            raise NotAMember(f"{worker} is not an active member of task {task_id}")

    async def settled(self, task_id: int) -> bool:
        """Whether the task is over on chain (or unknown there): its blobs may go once the grace has passed."""
        try:
            return (await get_task_overview(self.client, task_id)).status not in LIVE_STATUSES
        except QueryFailed:
            return True
        except WalletError as error:
            log.warning("cannot read task %d (%s); keeping its blobs", task_id, error)
            return False


@dataclasses.dataclass(frozen=True)
class RelayOptions:
    max_skew: int = DEFAULT_MAX_SKEW
    """Seconds a push's signing time may be off the relay's clock (`relay_auth.py`)."""
    keep_settled: float = 86_400.0
    """Seconds a settled task's blobs stay, for the requester to fetch its result and stragglers to finish."""
    sweep_interval: float = 60.0
    """Seconds between looks at which stored tasks have settled."""
    limits: ConnectionLimits = ConnectionLimits()
    probe_addresses: AddressPolicy = AddressPolicy()
    """Where the reachability probe (`POST /probe`, `reachability.py`) may fetch from: public addresses only,
    unless a localnet's relay allows private ones."""


class Relay:
    """The relay's state: its store, the chain's members and the options (one per application)."""

    def __init__(self, store: RelayStore, members: ChainMembers, options: RelayOptions) -> None:
        self.store = store
        self.members = members
        self.options = options
        self.settled_since: dict[int, float] = {}

    async def authorize(self, request: web.Request, worker: str, resource: str, content_hash: str,
                        task_id: int | None = None) -> int:
        """The task of a push whose signature, time and membership are good; raises a `BlobError` otherwise."""
        signed = read_push_headers(request.headers)
        if task_id is not None and signed.task_id != task_id:
            raise PushSignatureInvalid(f"the push is signed for task {signed.task_id}, not task {task_id}")
        check_push(signed, worker, resource, content_hash, time.time(), self.options.max_skew)
        await self.members.check(signed.task_id, worker)
        return signed.task_id

    async def sweep(self) -> None:
        """Evict the tasks settled on chain for `keep_settled` seconds."""
        for task_id in self.store.tasks():
            if not await self.members.settled(task_id):
                self.settled_since.pop(task_id, None)
                continue
            since = self.settled_since.setdefault(task_id, time.monotonic())
            if time.monotonic() - since >= self.options.keep_settled:
                freed = await asyncio.to_thread(self.store.evict_task, task_id)
                self.settled_since.pop(task_id, None)
                log.info("task %d settled: evicted, %d bytes freed", task_id, freed)


def _refusal(error: BlobError) -> web.Response:
    status = {PushUnsigned: 401, PushSignatureInvalid: 401, NotAMember: 403, BlobTooLarge: 413, QuotaExceeded: 507,
              BlobNotFound: 409, ChainUnreadable: 503}.get(type(error), 400)
    return _slow_body(error) if isinstance(error, BodyTooSlow) else _error(status, str(error))


async def push_blob(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    worker, digest = request.match_info["worker_address"], request.match_info["digest"]
    try:
        check_blob_hash(digest)
        size = request.content_length
        if size is None:
            raise BlobRejected("a push states its Content-Length")
        if size > relay.store.blobs.max_blob_size:
            raise BlobTooLarge(f"body of {size} bytes exceeds the limit of {relay.store.blobs.max_blob_size}")
        task_id = await relay.authorize(request, worker, "blob", digest)
        relay.store.check_room(task_id, worker, digest, size)
        data = await _read_limited(request, relay.store.blobs.max_blob_size)
        added = await asyncio.to_thread(relay.store.add, task_id, worker, data, digest)
    except BlobError as error:  # BodyTooSlow included
        return _refusal(error)
    return web.json_response({"hash": digest, "size": len(data)}, status=201 if added else 200)


async def push_listing(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    worker = request.match_info["worker_address"]
    task_id, round_index = _route_task(request)
    try:
        body = await _read_limited(request, 1 << 20)
        await relay.authorize(request, worker, f"checkpoints/{round_index}", hashlib.sha256(body).hexdigest(),
                              task_id)
        try:
            hashes = json.loads(body)["checkpoint_hashes"]
            if not isinstance(hashes, list) or not hashes:
                raise ValueError("checkpoint_hashes must be a non-empty list")
        except (ValueError, KeyError, TypeError) as error:
            raise BlobRejected(f"malformed checkpoint listing: {error}") from None
        relay.store.set_listing(task_id, worker, round_index, hashes)
    except BlobError as error:
        return _refusal(error)
    return web.json_response({"checkpoint_hashes": hashes}, status=201)


async def get_blob(request: web.Request) -> web.StreamResponse:
    return blob_file_response(request.app[RELAY_KEY].store.blobs, request.match_info["digest"])


async def get_listing(request: web.Request) -> web.Response:
    task_id, round_index = _route_task(request)
    try:
        hashes = request.app[RELAY_KEY].store.listing(task_id, request.match_info["worker_address"], round_index)
    except BlobNotFound as error:
        return _error(404, str(error))
    return web.json_response({"checkpoint_hashes": hashes})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "relay": True})


def build_relay_app(relay: Relay) -> web.Application:
    app = web.Application(client_max_size=relay.store.blobs.max_blob_size + 1)
    app[RELAY_KEY] = relay
    app[LIMITS_KEY] = relay.options.limits  # the body timeout `_read_limited` applies
    app.router.add_get("/health", health)
    app.router.add_get("/blobs/{digest}", get_blob)
    app.router.add_get("/workers/{worker_address}/blobs/{digest}", get_blob)
    app.router.add_put("/workers/{worker_address}/blobs/{digest}", push_blob)
    app.router.add_get("/workers/{worker_address}/tasks/{task_id}/rounds/{round}/checkpoints", get_listing)
    app.router.add_put("/workers/{worker_address}/tasks/{task_id}/rounds/{round}/checkpoints", push_listing)
    add_probe_route(app, relay.options.probe_addresses)  # workers ask whether they can be reached (preflight)
    return app


class RelayServer:
    """The relay on host:port with a start/run/stop lifecycle (port 0 picks a free port): serves, and sweeps
    settled tasks every `sweep_interval` seconds while `run` runs."""

    def __init__(self, relay: Relay, host: str = "127.0.0.1", port: int = 0) -> None:
        self.relay = relay
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        limits = self.relay.options.limits
        self._runner = web.AppRunner(build_relay_app(self.relay), access_log=None,
                                     keepalive_timeout=limits.header_timeout)
        await self._runner.setup()
        guard = ConnectionGuard(limits, admitted_total(limits))
        self._server = await asyncio.get_running_loop().create_server(
            guard.protocol_factory(self._runner.server), self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def run(self, stopping: asyncio.Event) -> None:
        """Sweep until `stopping` is set."""
        while not stopping.is_set():
            try:
                await self.relay.sweep()
            except (OSError, BlobError) as error:
                log.error("sweeping settled tasks failed: %s", error)
            try:
                await asyncio.wait_for(stopping.wait(), self.relay.options.sweep_interval)
            except asyncio.TimeoutError:
                pass

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.relay.members.client.close()
