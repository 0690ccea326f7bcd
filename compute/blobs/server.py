"""The blob service: aiohttp routes over a `BlobStore`.

    GET  /blobs/<hex>                                  anyone: the bytes (404 if absent)
    PUT  /blobs/<hex>                                  owner: store; 400 if the body hashes to anything else
    POST /blobs                                        owner: store; returns {"hash": "<hex>"}
    GET  /tasks/<task_id>/rounds/<r>/checkpoints       anyone: {"checkpoint_hashes": [...]}
    PUT  /tasks/<task_id>/rounds/<r>/checkpoints       owner: record that listing (blobs must be stored)
    GET  /health                                       {"ok": true}

The owner authenticates with `Authorization: Bearer <token>`. Bodies above the store's size limit are cut
off while streaming (413) and never touch the disk. Errors are JSON `{"error": "..."}`.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from aiohttp import web

from .errors import BlobError, BlobHashMismatch, BlobNotFound, BlobTooLarge, InvalidBlobHash
from .store import BlobStore, check_blob_hash

STORE_KEY = web.AppKey("store", BlobStore)
TOKEN_KEY = web.AppKey("owner_token", str)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _owner_only(request: web.Request) -> web.Response | None:
    token = request.app[TOKEN_KEY]
    given = request.headers.get("Authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return _error(401, "only the owner may write blobs (Authorization: Bearer <token>)")
    return None


async def _read_limited(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise BlobTooLarge(f"body of {request.content_length} bytes exceeds the limit of {limit}")
    pieces = []
    size = 0
    async for piece in request.content.iter_chunked(1 << 16):
        size += len(piece)
        if size > limit:
            raise BlobTooLarge(f"body exceeds the limit of {limit} bytes")
        pieces.append(piece)
    return b"".join(pieces)


def _route_task(request: web.Request) -> tuple[int, int]:
    try:
        task_id, round_index = int(request.match_info["task_id"]), int(request.match_info["round"])
    except ValueError:
        raise web.HTTPBadRequest(text=json.dumps({"error": "task id and round must be integers"}),
                                 content_type="application/json") from None
    if not (0 <= task_id < 2**64 and 0 <= round_index < 2**64):
        raise web.HTTPBadRequest(text=json.dumps({"error": "task id and round must be unsigned 64-bit"}),
                                 content_type="application/json")
    return task_id, round_index


async def get_blob(request: web.Request) -> web.StreamResponse:
    store = request.app[STORE_KEY]
    try:
        path = store.path(request.match_info["digest"])
    except InvalidBlobHash as error:
        return _error(400, str(error))
    if not path.is_file():
        return _error(404, f"blob {request.match_info['digest']} not found")
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


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
    except (ValueError, KeyError, TypeError) as error:
        return _error(400, f"malformed checkpoint listing: {error}")
    except BlobError as error:
        return _error(400, str(error))
    return web.json_response({"checkpoint_hashes": hashes}, status=201)


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def build_app(store: BlobStore, owner_token: str) -> web.Application:
    """The aiohttp application; `owner_token` empty means read-only."""
    app = web.Application(client_max_size=store.max_blob_size + 1)
    app[STORE_KEY] = store
    app[TOKEN_KEY] = owner_token
    app.router.add_get("/health", health)
    app.router.add_get("/blobs/{digest}", get_blob)
    app.router.add_put("/blobs/{digest}", put_blob)
    app.router.add_post("/blobs", put_blob)
    app.router.add_get("/tasks/{task_id}/rounds/{round}/checkpoints", get_checkpoints)
    app.router.add_put("/tasks/{task_id}/rounds/{round}/checkpoints", put_checkpoints)
    return app


class BlobServer:
    """Serve a store on host:port with a start/stop lifecycle (port 0 picks a free port)."""

    def __init__(self, store: BlobStore, owner_token: str = "", host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store
        self.owner_token = owner_token
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(build_app(self.store, self.owner_token), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "BlobServer":
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()
