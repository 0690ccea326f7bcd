"""A blob relay: workers with no inbound route push their blobs here; verifiers and other workers fetch them.

    PUT /workers/<worker>/blobs/<hex>                                   signed push of one blob
    PUT /workers/<worker>/tasks/<task>/rounds/<r>/checkpoints           signed push of a round's listing
    GET /workers/<worker>/blobs/<hex>                                   anyone: the bytes (any worker's path)
    GET /workers/<worker>/tasks/<task>/rounds/<r>/checkpoints           anyone: {"checkpoint_hashes": [...]}
    GET /blobs/<hex>, GET /health
    OPTIONS (a browser's preflight)                                     a push from a page of any origin (`cors.py`)

A worker registers the relay's URL on chain (`relay`); fetchers then read `<relay>/workers/<worker>` as they
would the worker's own blob service (`chain.market.urls.relay_worker_url`). Validators run one beside their
verifier, and anyone may run one: it holds no key.

A push is refused, with a JSON `{"error": ...}`, when a name in its path is malformed (400: the worker address,
task id and round are read strictly before anything else, `path_names.py`), the blob's name is not a hash or
the body does not hash to it (400), it is over the size bound (413, before it is read), the signature headers
are missing, old or wrong, or the signature is stale (401, `relay_auth.py`), it is signed for another relay
(421), the signer is not an active member of a live task on chain (403: read through the node's RPC,
`ChainMembers`), it is for a round other than the task's current one (409), or the worker's share of the task
or the relay is full (507, `relay_store.py`, which counts blobs and listings alike). A refused push leaves
nothing behind: its body goes to a temporary file that becomes the blob only once the push is accepted.

No request parses a record, and no record or listing is read or written on the event loop: a push is charged
and checked from memory, its body hashed and written on a thread; a listing GET reads one file of bounded length
on a thread and sends its bytes as they are. Fetching needs no trust in the relay: every fetcher checks each blob
against the hash the chain committed. A task settled on chain is evicted `keep_settled` seconds after the
relay first sees it so (the requester fetches the final weights in between); connections are capped as on a
worker's blob service.

A relay knows itself by the URLs workers reach it by (`RelayOptions.public_urls`, by default the one it listens
on): a push signed for any other is refused, so a push cannot be played from one relay to another.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time

from aiohttp import web

from .connect_policy import AddressPolicy
from .connections import ConnectionLimits
from .cors import public_reads
from .errors import BlobError, BlobNotFound, BlobRejected, BlobTooLarge
from .guarded_service import GuardedService
from .path_names import worker_address
from .reachability import add_probe_route
from .relay_auth import (DEFAULT_MAX_SKEW, PushForAnotherRelay, PushSignature, PushSignatureInvalid, PushUnsigned,
                         check_push, read_push_headers, relay_identity)
from .relay_members import ChainMembers, ChainUnreadable, NotAMember, WrongRound
from .relay_store import IncomingBlob, QuotaExceeded, RelayStore
from .server import LIMITS_KEY, BodyTooSlow, _error, _read_limited, _route_task, _slow_body, blob_file_response
from .store import check_blob_hash

log = logging.getLogger(__name__)

RELAY_KEY = web.AppKey("relay", "Relay")
WRITE_BUFFER = 1 << 20
"""Bytes of a push's body gathered before they go to its temporary file (on a thread): few thread hand-offs,
little memory per push."""
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
"""Listening addresses that name no URL a worker could sign a push for."""
LISTING_ENTRY_BYTES = 72
"""Room a listing's body may take per hash (64 hex digits, quotes, a separator and spaces)."""


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
    public_urls: tuple[str, ...] = ()
    """The URLs workers reach this relay by (what they register on chain): pushes are signed for one of them.
    Empty: the URL it listens on (`RelayServer`)."""


class Relay:
    """The relay's state: its store, the chain's members, the options and the URLs it is known by (one per
    application)."""

    def __init__(self, store: RelayStore, members: ChainMembers, options: RelayOptions) -> None:
        self.store = store
        self.members = members
        self.options = options
        self.known_as: tuple[str, ...] = tuple(relay_identity(url) for url in options.public_urls)
        """What pushes must be signed for (`relay_auth.relay_identity` forms); set from the listening address
        when the options name none."""
        self.settled_since: dict[int, float] = {}

    @property
    def listing_body_limit(self) -> int:
        return 64 + LISTING_ENTRY_BYTES * self.store.max_listing_entries

    async def authorize(self, request: web.Request, worker: str, resource: str, content_hash: str,
                        task_id: int | None = None, round_index: int | None = None) -> PushSignature:
        """The signature of a push whose relay, signer, time, membership and round are good; raises a
        `BlobError` otherwise. `task_id` and `round_index`: what the path names, which the signature must too."""
        signed = read_push_headers(request.headers)
        if task_id is not None and signed.task_id != task_id:
            raise PushSignatureInvalid(f"the push is signed for task {signed.task_id}, not task {task_id}")
        if round_index is not None and signed.round_index != round_index:
            raise PushSignatureInvalid(f"the push is signed for round {signed.round_index}, not round {round_index}")
        check_push(signed, self.known_as, worker, resource, content_hash, time.time(), self.options.max_skew)
        await self.members.check(signed.task_id, worker, signed.round_index)
        return signed

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
    status = {PushUnsigned: 401, PushSignatureInvalid: 401, PushForAnotherRelay: 421, NotAMember: 403,
              BlobTooLarge: 413, QuotaExceeded: 507, BlobNotFound: 409, WrongRound: 409,
              ChainUnreadable: 503}.get(type(error), 400)
    return _slow_body(error) if isinstance(error, BodyTooSlow) else _error(status, str(error))


async def _receive(request: web.Request, store: RelayStore, size: int) -> IncomingBlob:
    """A push's body, `size` bytes by its Content-Length, written to a temporary file and hashed on threads
    (`BodyTooSlow` past the limits' body timeout); the file is removed if anything goes wrong."""
    incoming = await asyncio.to_thread(store.receive)
    timeout = request.app[LIMITS_KEY].body_timeout
    pending, buffered = [], 0
    try:
        try:
            async with asyncio.timeout(timeout):
                async for piece in request.content.iter_chunked(1 << 16):
                    pending.append(piece)
                    buffered += len(piece)
                    if incoming.size + buffered > size:
                        raise BlobRejected(f"the body is longer than the {size} bytes its Content-Length states")
                    if buffered >= WRITE_BUFFER:
                        await asyncio.to_thread(incoming.write, b"".join(pending))
                        pending, buffered = [], 0
            if pending:
                await asyncio.to_thread(incoming.write, b"".join(pending))
        except TimeoutError:
            raise BodyTooSlow(f"body not received within {timeout:g} s ({incoming.size + buffered} bytes "
                              f"came)") from None
    except BaseException:
        incoming.discard()
        raise
    return incoming


async def push_blob(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    digest = request.match_info["digest"]
    try:
        worker = worker_address(request.match_info["worker_address"])
        check_blob_hash(digest)
        size = request.content_length
        if size is None:
            raise BlobRejected("a push states its Content-Length")
        if size > relay.store.blobs.max_blob_size:
            raise BlobTooLarge(f"body of {size} bytes exceeds the limit of {relay.store.blobs.max_blob_size}")
        signed = await relay.authorize(request, worker, "blob", digest)
        reservation = relay.store.reserve(signed.task_id, worker, digest, size)  # the room, before the body
        if reservation is None:
            return web.json_response({"hash": digest, "size": size}, status=200)  # its record names it already
        try:
            incoming = await _receive(request, relay.store, size)
            added = await asyncio.to_thread(relay.store.commit, reservation, incoming)
        finally:
            relay.store.release(reservation)  # a no-op once committed
    except BlobError as error:  # BodyTooSlow included
        return _refusal(error)
    return web.json_response({"hash": digest, "size": size}, status=201 if added else 200)


def _read_listing(body: bytes) -> list[str]:
    try:
        hashes = json.loads(body)["checkpoint_hashes"]
        if not isinstance(hashes, list) or not hashes:
            raise ValueError("checkpoint_hashes must be a non-empty list")
    except (ValueError, KeyError, TypeError) as error:
        raise BlobRejected(f"malformed checkpoint listing: {error}") from None
    return hashes


async def push_listing(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    task_id, round_index = _route_task(request)
    try:
        worker = worker_address(request.match_info["worker_address"])
        body = await _read_limited(request, relay.listing_body_limit)
        await relay.authorize(request, worker, "checkpoints", hashlib.sha256(body).hexdigest(), task_id, round_index)
        hashes = await asyncio.to_thread(_read_listing, body)
        document = await asyncio.to_thread(relay.store.set_listing, task_id, worker, round_index, hashes)
    except BlobError as error:
        return _refusal(error)
    return web.Response(body=document, status=201, content_type="application/json")


async def get_blob(request: web.Request) -> web.StreamResponse:
    if "worker_address" in request.match_info:
        try:
            worker_address(request.match_info["worker_address"])
        except BlobError as error:
            return _error(400, str(error))
    return blob_file_response(request.app[RELAY_KEY].store.blobs, request.match_info["digest"])


async def get_listing(request: web.Request) -> web.Response:
    task_id, round_index = _route_task(request)
    try:
        worker = worker_address(request.match_info["worker_address"])
        document = await asyncio.to_thread(request.app[RELAY_KEY].store.listing, task_id, worker, round_index)
    except BlobNotFound as error:
        return _error(404, str(error))
    except BlobError as error:
        return _error(400, str(error))
    return web.Response(body=document, content_type="application/json")


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "relay": True})


def build_relay_app(relay: Relay) -> web.Application:
    # CORS: a browser worker's tab reads blobs and pushes its own, signed, from another origin (`cors.py`)
    app = web.Application(client_max_size=relay.store.blobs.max_blob_size + 1,
                          middlewares=[public_reads(pushes=True)])
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


class RelayServer(GuardedService):
    """The relay on host:port with a start/run/stop lifecycle (port 0 picks a free port): serves, and sweeps
    settled tasks every `sweep_interval` seconds while `run` runs."""

    def __init__(self, relay: Relay, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port, relay.options.limits)
        self.relay = relay

    def build_app(self) -> web.Application:
        return build_relay_app(self.relay)

    async def start(self) -> None:
        """Listen; a relay given no public URL is known by the one it listens on from then on (ValueError when
        that is every address: nobody signs a push for 0.0.0.0)."""
        if not self.relay.known_as and self.host in WILDCARD_HOSTS:
            raise ValueError(f"a relay listening on every address ({self.host or 'all'}) must be told the URL "
                             f"workers reach it by (--public-url): pushes are signed for it")
        await super().start()
        if not self.relay.known_as:
            self.relay.known_as = (relay_identity(self.url),)

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
        await super().stop()
        await self.relay.members.client.close()
