"""The blob service: aiohttp routes over a `BlobStore`.

    GET  /blobs/<hex>                                  anyone: the bytes (404 if absent)
    PUT  /blobs/<hex>                                  owner: store; 400 if the body hashes to anything else
    POST /blobs                                        owner: store; returns {"hash": "<hex>"}
    GET  /tasks/<task_id>/rounds/<r>/checkpoints       anyone: {"checkpoint_hashes": [...]}
    PUT  /tasks/<task_id>/rounds/<r>/checkpoints       owner: record that listing (blobs must be stored)
    GET  /health                                       {"ok": true}

Every read answers CORS for any origin (a browser worker's tab reads blobs from another origin); the owner's
writes answer no preflight, so no web page can send them (`cors.py`).

The owner authenticates with `Authorization: Bearer <token>`. Bodies above the store's size limit are cut
off while streaming (413) and never touch the disk; a body slower than the limits' `body_timeout` is cut off
too (408). Connections are capped per peer and in all, below the process's file limit, and a connection that
does not send a complete request head within `header_timeout` is closed (`connections.py`), so a peer that
floods the port neither keeps others from being served nor takes the descriptors the worker's own store
needs. Errors are JSON `{"error": "..."}`.
"""

from __future__ import annotations

import asyncio
import hmac
import json

from aiohttp import web

from .connections import ConnectionLimits
from .cors import public_reads
from .errors import BlobError, BlobHashMismatch, BlobNotFound, BlobTooLarge, InvalidBlobHash
from .guarded_service import GuardedService
from .path_names import InvalidPathName, unsigned_id
from .store import BlobStore, check_blob_hash

STORE_KEY = web.AppKey("store", BlobStore)
TOKEN_KEY = web.AppKey("owner_token", str)
LIMITS_KEY = web.AppKey("limits", ConnectionLimits)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _owner_only(request: web.Request) -> web.Response | None:
    token = request.app[TOKEN_KEY]
    given = request.headers.get("Authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return _error(401, "only the owner may write blobs (Authorization: Bearer <token>)")
    return None


class BodyTooSlow(BlobError):
    """An upload's body did not arrive within the limits' `body_timeout`."""


async def _read_limited(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise BlobTooLarge(f"body of {request.content_length} bytes exceeds the limit of {limit}")
    timeout = request.app[LIMITS_KEY].body_timeout
    pieces = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for piece in request.content.iter_chunked(1 << 16):
                size += len(piece)
                if size > limit:
                    raise BlobTooLarge(f"body exceeds the limit of {limit} bytes")
                pieces.append(piece)
    except TimeoutError:
        raise BodyTooSlow(f"body not received within {timeout:g} s ({size} bytes came)") from None
    return b"".join(pieces)


def _slow_body(error: BodyTooSlow) -> web.Response:
    response = _error(408, str(error))
    response.force_close()  # the rest of the body may still be on its way
    return response


def _route_task(request: web.Request) -> tuple[int, int]:
    """The task id and round of the request's path, read strictly (`path_names.unsigned_id`); 400 otherwise."""
    try:
        return (unsigned_id(request.match_info["task_id"], "task id"),
                unsigned_id(request.match_info["round"], "round"))
    except InvalidPathName as error:
        raise web.HTTPBadRequest(text=json.dumps({"error": str(error)}), content_type="application/json") from None


def blob_file_response(store, digest: str) -> web.StreamResponse:
    """GET /blobs/{digest} from `store`: the file streamed as bytes, 400 for a malformed hash, 404 when absent.
    The blob service and the relay serve blobs alike, so a fetcher reads either the same way."""
    try:
        path = store.path(digest)
    except InvalidBlobHash as error:
        return _error(400, str(error))
    if not path.is_file():
        return _error(404, f"blob {digest} not found")
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def get_blob(request: web.Request) -> web.StreamResponse:
    return blob_file_response(request.app[STORE_KEY], request.match_info["digest"])


async def put_blob(request: web.Request) -> web.Response:
    if (denied := _owner_only(request)) is not None:
        return denied
    store = request.app[STORE_KEY]
    digest = request.match_info.get("digest")
    try:
        if digest is not None:
            check_blob_hash(digest)
        data = await _read_limited(request, store.max_blob_size)
        existed = digest is not None and store.has(digest)
        stored = store.put(data, expected=digest)
    except BlobTooLarge as error:
        return _error(413, str(error))
    except BodyTooSlow as error:
        return _slow_body(error)
    except (InvalidBlobHash, BlobHashMismatch) as error:
        return _error(400, str(error))
    return web.json_response({"hash": stored, "size": len(data)}, status=200 if existed else 201)


async def get_checkpoints(request: web.Request) -> web.Response:
    task_id, round_index = _route_task(request)
    try:
        hashes = request.app[STORE_KEY].get_checkpoints(task_id, round_index)
    except BlobNotFound as error:
        return _error(404, str(error))
    return web.json_response({"checkpoint_hashes": hashes})


async def put_checkpoints(request: web.Request) -> web.Response:
    if (denied := _owner_only(request)) is not None:
        return denied
    task_id, round_index = _route_task(request)
    store = request.app[STORE_KEY]
    try:
        document = json.loads(await _read_limited(request, 1 << 20))
        hashes = document["checkpoint_hashes"]
        if not isinstance(hashes, list) or not hashes:
            raise ValueError("checkpoint_hashes must be a non-empty list")
        for digest in hashes:
            check_blob_hash(digest)
        store.set_checkpoints(task_id, round_index, hashes)
    except BodyTooSlow as error:
        return _slow_body(error)
    except (ValueError, KeyError, TypeError) as error:
        return _error(400, f"malformed checkpoint listing: {error}")
    except BlobError as error:
        return _error(400, str(error))
    return web.json_response({"checkpoint_hashes": hashes}, status=201)


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def build_app(store: BlobStore, owner_token: str, limits: ConnectionLimits = ConnectionLimits()) -> web.Application:
    """The aiohttp application; `owner_token` empty means read-only."""
    # CORS: the reads are public, so a browser worker's tab may read them from any origin (`cors.py`)
    app = web.Application(client_max_size=store.max_blob_size + 1, middlewares=[public_reads()])
    app[STORE_KEY] = store
    app[TOKEN_KEY] = owner_token
    app[LIMITS_KEY] = limits
    app.router.add_get("/health", health)
    app.router.add_get("/blobs/{digest}", get_blob)
    app.router.add_put("/blobs/{digest}", put_blob)
    app.router.add_post("/blobs", put_blob)
    app.router.add_get("/tasks/{task_id}/rounds/{round}/checkpoints", get_checkpoints)
    app.router.add_put("/tasks/{task_id}/rounds/{round}/checkpoints", put_checkpoints)
    return app


class BlobServer(GuardedService):
    """Serve a store on host:port with a start/stop lifecycle (port 0 picks a free port), within `limits`."""

    def __init__(self, store: BlobStore, owner_token: str = "", host: str = "127.0.0.1", port: int = 0,
                 limits: ConnectionLimits = ConnectionLimits()) -> None:
        super().__init__(host, port, limits)
        self.store = store
        self.owner_token = owner_token

    def build_app(self) -> web.Application:
        return build_app(self.store, self.owner_token, self.limits)
