"""CometBFT's JSON-RPC transport: URI (`GET /method?arg=...`), JSON-RPC 2.0 POST (single or batch) and the
websocket at `/websocket` (any method, plus `subscribe`, `unsubscribe`, `unsubscribe_all`).

Argument decoding follows CometBFT's rules. In a URI, integers may be bare (`height=5`) or quoted, strings
are quoted (`path="/account/trolly1..."`), byte arguments are `0x`-hex or a quoted string taken as its raw
bytes. In a JSON-RPC body, params are an object by name or an array by position; byte arguments (`tx`,
`hash`) are base64, `HexBytes` arguments (`abci_query`'s `data`) are hex, integers are strings or numbers.

Errors are JSON-RPC errors as CometBFT sends them: -32700 parse error, -32600 invalid request, -32601
method not found, -32602 invalid params (with the reason in `data`), -32603 internal error (the method's
failure, e.g. `height 9 must be less than or equal to the current blockchain height 5`, in `data`). A URI
request that fails gets HTTP 500 with `id: -1`, a POST gets HTTP 200.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging

from aiohttp import WSMsgType, web

from . import EngineError
from .abci_client import parse_address
from .query import QueryError, parse_query
from .rpc_methods import METHODS, RpcError

log = logging.getLogger("trolly.engine.rpc")

MAX_BODY_BYTES = 1_000_000
MAX_BATCH = 10
MAX_SUBSCRIPTIONS_PER_CLIENT = 5
URI_REQUEST_ID = -1


class InvalidParams(RpcError):
    code = -32602
    message = "Invalid params"


def _error(request_id, code: int, message: str, data: str = "") -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message, "data": data}}


def _result(request_id, result) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


# ------------------------------------------------------------------------------------ argument decoding


def _uri_value(kind: str, raw: str):
    quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"'
    inner = raw[1:-1] if quoted else raw
    if kind == "int":
        if not inner.lstrip("-").isdigit():
            raise InvalidParams(f"error converting http params to arguments: expected an integer, got {raw!r}")
        return int(inner)
    if kind == "bool":
        if inner not in ("true", "false"):
            raise InvalidParams(f"error converting http params to arguments: expected true or false, got {raw!r}")
        return inner == "true"
    if raw[:2].lower() == "0x":
        try:
            value = bytes.fromhex(raw[2:])
        except ValueError as exc:
            raise InvalidParams(f"error converting http params to arguments: {exc}") from None
        return value.decode(errors="replace") if kind == "str" else value
    if kind == "str":
        return inner
    if quoted:
        return inner.encode()
    raise InvalidParams(f"error converting http params to arguments: {raw!r} must be 0x-prefixed hex or a quoted string")


def _json_value(kind: str, value):
    try:
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).lstrip("-").isdigit():
                raise ValueError(f"expected an integer, got {value!r}")
            return int(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"expected a boolean, got {value!r}")
            return value
        if kind == "str":
            if not isinstance(value, str):
                raise ValueError(f"expected a string, got {value!r}")
            return value
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        if kind == "hexbytes":
            return bytes.fromhex(value)
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise InvalidParams(f"error converting json params to arguments: {exc}") from None


def _bind(method: str, params, from_uri: bool) -> dict:
    spec = METHODS[method].params
    arguments: dict = {}
    if isinstance(params, list):
        if len(params) > len(spec):
            raise InvalidParams(f"error converting json params to arguments: expected at most {len(spec)} params, got {len(params)}")
        params = {name: value for (name, _), value in zip(spec, params)}
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParams("error converting json params to arguments: params must be an object or an array")
    for name, kind in spec:
        if name not in params or params[name] is None or (from_uri and params[name] == ""):
            continue
        arguments[name] = _uri_value(kind, params[name]) if from_uri else _json_value(kind, params[name])
    return arguments


# ------------------------------------------------------------------------------------------------ server


class RpcServer:
    def __init__(self, node, laddr: str, broadcast_tx_commit_timeout: float, cors_origins: tuple[str, ...] = ()) -> None:
        self.node = node
        self.laddr = laddr
        self.cors_origins = cors_origins
        self.broadcast_tx_commit_timeout = broadcast_tx_commit_timeout
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    async def start(self) -> None:
        kind, target = parse_address(self.laddr)
        if kind != "tcp":
            raise EngineError(f"the RPC listens on tcp://HOST:PORT only, got {self.laddr!r}")
        application = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._cors])
        application.router.add_get("/websocket", self._websocket)
        application.router.add_route("OPTIONS", "/{tail:.*}", self._preflight)
        application.router.add_post("/", self._post)
        application.router.add_get("/", self._index)
        application.router.add_get("/{method}", self._get)
        self._runner = web.AppRunner(application, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, target[0], target[1])
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise EngineError(f"cannot listen for JSON-RPC on {self.laddr}: {exc}") from None
        host, port = site._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _allowed_origin(self, request: web.Request) -> str | None:
        origin = request.headers.get("Origin")
        if not origin or not self.cors_origins:
            return None
        return origin if "*" in self.cors_origins or origin in self.cors_origins else None

    @web.middleware
    async def _cors(self, request: web.Request, handler):
        """CORS as config.toml `[rpc] cors_allowed_origins` allows (none by default, like CometBFT)."""
        response = await handler(request)
        origin = self._allowed_origin(request)
        if origin is not None and not isinstance(response, web.WebSocketResponse):
            response.headers["Access-Control-Allow-Origin"] = origin
        return response

    async def _preflight(self, request: web.Request) -> web.Response:
        if self._allowed_origin(request) is None:
            return web.Response(status=403)
        return web.Response(headers={
            "Access-Control-Allow-Methods": "HEAD, GET, POST",
            "Access-Control-Allow-Headers": "Origin, Accept, Content-Type, X-Requested-With, X-Server-Time",
        })

    async def call(self, method: str, params, request_id, from_uri: bool = False) -> dict:
        """One JSON-RPC call, answered with a result or a CometBFT-style error object."""
        if method not in METHODS:
            return _error(request_id, -32601, "Method not found", "")
        try:
            arguments = _bind(method, params, from_uri)
            result = await METHODS[method].handler(self.node, **arguments)
        except RpcError as exc:
            return _error(request_id, exc.code, exc.message, str(exc))
        except EngineError as exc:
            return _error(request_id, -32603, "Internal error", str(exc))
        except Exception as exc:  # a bug: answer like CometBFT's panic recovery, and keep the traceback
            log.exception("RPC method %s failed", method)
            return _error(request_id, -32603, "Internal error", f"{type(exc).__name__}: {exc}")
        return _result(request_id, result)

    async def _index(self, request: web.Request) -> web.Response:
        names = "\n".join(f"//{request.host}/{name}" for name in sorted(METHODS))
        return web.Response(text=f"Available endpoints:\n{names}\n")

    async def _get(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method not in METHODS:
            return web.json_response(_error(URI_REQUEST_ID, -32601, "Method not found", ""), status=404)
        answer = await self.call(method, dict(request.query), URI_REQUEST_ID, from_uri=True)
        return web.json_response(answer, status=500 if "error" in answer else 200)

    async def _post(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return web.json_response(_error(None, -32700, "Parse error", f"error unmarshaling request: {exc}"))
        if isinstance(body, list):
            if not body:
                return web.json_response(_error(None, -32600, "Invalid Request", "empty batch"))
            if len(body) > MAX_BATCH:
                return web.json_response(_error(None, -32600, "Invalid Request", f"batch of {len(body)} exceeds the maximum {MAX_BATCH}"))
            return web.json_response([await self._one(item) for item in body])
        return web.json_response(await self._one(body))

    async def _one(self, item) -> dict:
        if not isinstance(item, dict) or not isinstance(item.get("method"), str):
            return _error(item.get("id") if isinstance(item, dict) else None, -32600, "Invalid Request", "a request needs a string method")
        return await self.call(item["method"], item.get("params"), item.get("id"))

    # --------------------------------------------------------------------------------------- websocket

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(heartbeat=30)
        await socket.prepare(request)
        self._sockets.add(socket)
        subscriptions: dict[str, tuple] = {}  # query text -> (subscription, forwarding task)
        send_lock = asyncio.Lock()

        async def send(message: dict) -> None:
            async with send_lock:
                if not socket.closed:
                    try:
                        await socket.send_str(json.dumps(message))
                    except (ConnectionError, RuntimeError):
                        pass  # the client went away; the read loop ends and cleans up

        try:
            async for message in socket:
                if message.type != WSMsgType.TEXT:
                    continue
                try:
                    item = json.loads(message.data)
                except json.JSONDecodeError as exc:
                    await send(_error(None, -32700, "Parse error", f"error unmarshaling request: {exc}"))
                    continue
                if not isinstance(item, dict) or not isinstance(item.get("method"), str):
                    await send(_error(None, -32600, "Invalid Request", "a request needs a string method"))
                    continue
                method, request_id = item["method"], item.get("id")
                if method in ("subscribe", "unsubscribe", "unsubscribe_all"):
                    await send(self._subscription_call(method, item.get("params"), request_id, subscriptions, send))
                else:
                    await send(await self.call(method, item.get("params"), request_id))
        finally:
            for subscription, task in subscriptions.values():
                self.node.events.unsubscribe(subscription)
                task.cancel()
            self._sockets.discard(socket)
        return socket

    def _subscription_call(self, method, params, request_id, subscriptions, send) -> dict:
        if method == "unsubscribe_all":
            if not subscriptions:
                return _error(request_id, -32603, "Internal error", "subscription not found")
            for subscription, task in subscriptions.values():
                self.node.events.unsubscribe(subscription)
                task.cancel()
            subscriptions.clear()
            return _result(request_id, {})
        if isinstance(params, list):
            params = {"query": params[0]} if params else {}
        text = params.get("query") if isinstance(params, dict) else None
        if not isinstance(text, str):
            return _error(request_id, -32602, "Invalid params", "query must be a string")
        if method == "unsubscribe":
            if text not in subscriptions:
                return _error(request_id, -32603, "Internal error", "subscription not found")
            subscription, task = subscriptions.pop(text)
            self.node.events.unsubscribe(subscription)
            task.cancel()
            return _result(request_id, {})
        try:
            query = parse_query(text)
        except QueryError as exc:
            return _error(request_id, -32603, "Internal error", f"failed to parse query: {exc}")
        if text in subscriptions:
            return _error(request_id, -32603, "Internal error", "already subscribed")
        if len(subscriptions) >= MAX_SUBSCRIPTIONS_PER_CLIENT:
            return _error(request_id, -32603, "Internal error", f"max_subscriptions_per_client {MAX_SUBSCRIPTIONS_PER_CLIENT} reached")
        subscription = self.node.events.subscribe(query)
        task = asyncio.ensure_future(self._forward(subscription, text, request_id, send))
        subscriptions[text] = (subscription, task)
        return _result(request_id, {})

    async def _forward(self, subscription, text: str, request_id, send) -> None:
        while True:
            item = await subscription.queue.get()
            if item is None:
                await send(_error(request_id, -32000, "Server error", f"subscription was cancelled (reason: {subscription.cancelled})"))
                return
            events, data = item
            await send(_result(request_id, {"query": text, "data": data, "events": events}))
