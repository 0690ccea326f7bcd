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

Limits, each answered as CometBFT answers it (`RpcLimits`, from config.toml `[rpc]`):
- at most `max_open_connections` connections at once; later ones wait in the kernel's accept queue until one
  closes (CometBFT's `netutil.LimitListener`), websockets included;
- every request, headers and body, must arrive within `read_timeout` of the connection opening or of the
  previous response (Go's `ReadTimeout`/`ReadHeaderTimeout`, 10 s in CometBFT): a client trickling bytes
  (slowloris) is cut off, and so is an idle keep-alive connection; a body that is late is answered HTTP 400
  `error reading request body: i/o timeout`;
- a body over `max_body_bytes` is answered HTTP 400 `error reading request body: http: request body too
  large`; a websocket message over it closes the websocket (1009, message too big);
- a batch over `max_request_batch_size` is answered HTTP 400 `maximum JSON-RPC batch size exceeded`;
- subscriptions (websocket `subscribe` and each in-flight `broadcast_tx_commit`) are capped per client and
  in clients (`events.EventBus`): `max_subscriptions_per_client 5 reached`, `max_subscription_clients 100
  reached`;
- a websocket send that does not complete within `write_timeout` closes that websocket.

Integers are what CometBFT's Go handlers take, 64-bit: one with more digits, outside the int64 range, or written
with other than ASCII digits is invalid params (-32602), however it came (a URI value, a JSON string, a JSON
number of any length), and never reaches a handler; a query's number likewise fails the query's parse. A
request that is not JSON a reader can take (too deep, a number too long) is a parse error (-32700) on POST and on
the websocket, whose connection stays open.

Browsers: a web page the user visits can send a POST to `http://127.0.0.1:26657` or open its websocket (CORS
does not stop either from happening, only from being read, and not at all for a websocket), so a POST or a
websocket whose `Origin` header names a site not in `[rpc] cors_allowed_origins` (empty by default) is refused
with HTTP 403 before it is read. Clients that are not browsers send no `Origin` and are served as before.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import socket
from dataclasses import dataclass

from aiohttp import WSMsgType, web

from . import EngineError
from .abci_client import parse_address
from .event_bus import SubscriptionLimit
from .event_query import QueryError, parse_query
from .rpc_methods import METHODS, RpcError

log = logging.getLogger("trolly.engine.rpc")

URI_REQUEST_ID = -1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_INTEGER = re.compile(r"-?[0-9]{1,19}")
"""A decimal integer with at most the 19 digits of an int64, in ASCII digits only."""


@dataclass(frozen=True)
class RpcLimits:
    """What one client, or all of them together, may take from the RPC. The config keys and defaults are
    CometBFT v0.38's `[rpc]` ones; the timeouts are CometBFT's fixed server timeouts."""

    max_open_connections: int = 900
    """`[rpc] max_open_connections`: connections served at once (0: unlimited)."""
    max_body_bytes: int = 1_000_000
    """`[rpc] max_body_bytes`: largest HTTP request body and websocket message."""
    max_request_batch_size: int = 10
    """`[rpc] max_request_batch_size`: most requests in one JSON-RPC batch (0: unlimited)."""
    max_subscription_clients: int = 100
    """`[rpc] max_subscription_clients`: clients holding subscriptions at once."""
    max_subscriptions_per_client: int = 5
    """`[rpc] max_subscriptions_per_client`: subscriptions (and in-flight broadcast_tx_commit) per client."""
    read_timeout: float = 10.0
    """Seconds for a whole request (headers and body) to arrive, counted from the connection opening or from
    the previous response; also how long an idle keep-alive connection stays open."""
    write_timeout: float = 10.0
    """Seconds a websocket send may take before the websocket is closed (a client that stopped reading)."""

    @staticmethod
    def from_config(rpc: dict) -> "RpcLimits":
        """The limits in a config.toml `[rpc]` table; absent keys keep CometBFT's defaults."""
        defaults = RpcLimits()
        values = {}
        for name in ("max_open_connections", "max_body_bytes", "max_request_batch_size", "max_subscription_clients",
                     "max_subscriptions_per_client"):
            raw = rpc.get(name, getattr(defaults, name))
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise EngineError(f"config.toml [rpc] {name} must be a non-negative integer, got {raw!r}")
            values[name] = raw
        if values["max_body_bytes"] == 0 or values["max_subscriptions_per_client"] == 0:
            raise EngineError("config.toml [rpc] max_body_bytes and max_subscriptions_per_client must be positive")
        return RpcLimits(**values)


class _BodyError(Exception):
    """The request body could not be read (too large, or too slow); answered HTTP 400 as CometBFT does."""


class InvalidParams(RpcError):
    code = -32602
    message = "Invalid params"


def _error(request_id, code: int, message: str, data: str = "") -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message, "data": data}}


def _result(request_id, result) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


# ------------------------------------------------------------------------------------ argument decoding


def _int64(text: str, source: str) -> int:
    """`text` as the int64 a CometBFT handler takes; InvalidParams for anything else."""
    value = int(text) if _INTEGER.fullmatch(text) else None
    if value is None or not INT64_MIN <= value <= INT64_MAX:
        raise InvalidParams(f"error converting {source} params to arguments: expected a 64-bit integer, "
                            f"got {text[:40]!r}{'...' if len(text) > 40 else ''}")
    return value


def _json_integer(token: str) -> int | str:
    """`json.loads`'s reading of an integer literal: an int while it is short enough to be an int64, else its
    text, which no integer parameter accepts (and which never meets the interpreter's digit limit)."""
    return int(token) if len(token) <= 20 else token


def _decode_json(raw: str | bytes):
    """The JSON value of a request; `_Unparsable` for anything that is not JSON this reader takes (bad syntax or
    encoding, nesting deeper than the interpreter recurses)."""
    try:
        return json.loads(raw, parse_int=_json_integer)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _Unparsable(f"error unmarshaling request: {exc}") from None


class _Unparsable(Exception):
    """A request body or websocket message that is not JSON; answered -32700."""


def _uri_value(kind: str, raw: str):
    quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"'
    inner = raw[1:-1] if quoted else raw
    if kind == "int":
        return _int64(inner, "http")
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
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ValueError(f"expected an integer, got {value!r}"[:120])
            return _int64(str(value), "json")
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


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's request handler behind it, its read deadline, and its slot.

    The deadline runs while the connection waits for a request (from the connection opening, then from each
    response); the server's middleware stops it while a request is being handled and starts it again after.
    When it passes, the connection is aborted: a client that sends its headers or body too slowly, or sits
    idle, gives its slot back."""

    def __init__(self, inner: asyncio.Protocol, server: "RpcServer") -> None:
        self._inner = inner
        self._server = server
        self.transport: asyncio.Transport | None = None
        self.deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._server._open[transport] = self
        self.start_clock()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc) -> None:
        self.stop_clock()
        try:
            self._inner.connection_lost(exc)
        finally:
            self._server._closed(self)

    def start_clock(self) -> None:
        self.stop_clock()
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + self._server.limits.read_timeout
        self._timer = loop.call_at(self.deadline, self._expire)

    def stop_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        log.debug("closing an RPC connection that sent no complete request within %gs", self._server.limits.read_timeout)
        self.transport.abort()


class RpcServer:
    def __init__(self, node, laddr: str, broadcast_tx_commit_timeout: float, cors_origins: tuple[str, ...] = (),
                 limits: RpcLimits = RpcLimits()) -> None:
        self.node = node
        self.laddr = laddr
        self.cors_origins = cors_origins
        self.broadcast_tx_commit_timeout = broadcast_tx_commit_timeout
        self.limits = limits
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._open: dict[asyncio.Transport, _Connection] = {}
        self._slots: asyncio.Semaphore | None = None

    async def start(self) -> None:
        kind, target = parse_address(self.laddr)
        if kind != "tcp":
            raise EngineError(f"the RPC listens on tcp://HOST:PORT only, got {self.laddr!r}")
        application = web.Application(client_max_size=self.limits.max_body_bytes, middlewares=[self._clock, self._same_site, self._cors])
        application.router.add_get("/websocket", self._websocket)
        application.router.add_route("OPTIONS", "/{tail:.*}", self._preflight)
        application.router.add_post("/", self._post)
        application.router.add_get("/", self._index)
        application.router.add_get("/{method}", self._get)
        try:
            self._listener = socket.create_server(target, backlog=128, reuse_port=False)
        except OSError as exc:
            raise EngineError(f"cannot listen for JSON-RPC on {self.laddr}: {exc}") from None
        self._listener.setblocking(False)
        self._runner = web.AppRunner(application, access_log=None, handle_signals=False)
        await self._runner.setup()
        if self.limits.max_open_connections:
            self._slots = asyncio.Semaphore(self.limits.max_open_connections)
        self._accepting = asyncio.ensure_future(self._accept())
        host, port = self._listener.getsockname()[:2]
        self.url = f"http://{host}:{port}"

    async def _accept(self) -> None:
        """Accept while a slot is free (CometBFT's LimitListener): beyond `max_open_connections`, clients wait
        in the kernel's accept queue until a connection closes."""
        loop = asyncio.get_running_loop()
        while True:
            if self._slots is not None:
                await self._slots.acquire()
            try:
                connection, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # e.g. out of file descriptors: keep serving those already open
                self._release()
                log.warning("RPC accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            except BaseException:
                self._release()
                raise
            try:
                await loop.connect_accepted_socket(lambda: _Connection(self._runner.server(), self), connection)
            except OSError as exc:
                connection.close()
                self._release()
                log.warning("RPC connection setup failed: %s", exc)

    def _closed(self, connection: _Connection) -> None:
        if self._open.pop(connection.transport, None) is not None:
            self._release()

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def stop(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            try:
                await self._accepting
            except asyncio.CancelledError:
                pass
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for websocket in list(self._sockets):
            await websocket.close()
        for connection in list(self._open.values()):
            connection.transport.abort()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _clock(self, request: web.Request, handler):
        """A request is being handled: its connection's read deadline stops, and starts again after it."""
        connection = self._open.get(request.transport)
        if connection is not None:
            connection.stop_clock()
        try:
            return await handler(request)
        finally:
            if connection is not None and connection.transport is not None and not connection.transport.is_closing():
                connection.start_clock()

    async def _read_body(self, request: web.Request) -> bytes:
        """The body, within the request's read deadline and `max_body_bytes`."""
        connection = self._open.get(request.transport)
        loop = asyncio.get_running_loop()
        remaining = connection.deadline - loop.time() if connection is not None else self.limits.read_timeout
        try:
            return await asyncio.wait_for(request.read(), max(remaining, 0.0))
        except asyncio.TimeoutError:
            raise _BodyError("error reading request body: i/o timeout") from None
        except web.HTTPRequestEntityTooLarge:
            raise _BodyError("error reading request body: http: request body too large") from None

    def _allowed_origin(self, request: web.Request) -> str | None:
        origin = request.headers.get("Origin")
        if not origin or not self.cors_origins:
            return None
        return origin if "*" in self.cors_origins or origin in self.cors_origins else None

    @web.middleware
    async def _same_site(self, request: web.Request, handler):
        """Refuse a browser's POST or websocket from a site not in `cors_allowed_origins` (see the module
        docstring): HTTP 403, before the body is read or the websocket opened."""
        origin = request.headers.get("Origin")
        if (origin is not None and (request.method == "POST" or request.path == "/websocket")
                and self._allowed_origin(request) is None):
            log.info("refused a %s from the web page of %.100r: not in cors_allowed_origins", request.method, origin)
            response = web.json_response(_error(None, -32600, "Invalid Request",
                                                f"origin {origin[:100]!r} is not in cors_allowed_origins"),
                                         status=403)
            response.force_close()  # its body, if any, is not read
            return response
        return await handler(request)

    @web.middleware
    async def _cors(self, request: web.Request, handler):
        """CORS as config.toml `[rpc] cors_allowed_origins` allows (none by default, like CometBFT)."""
        response = await handler(request)
        origin = self._allowed_origin(request)
        if origin is not None and not isinstance(response, web.WebSocketResponse):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"  # the answer names the asking origin: no cache may share it
        return response

    async def _preflight(self, request: web.Request) -> web.Response:
        if self._allowed_origin(request) is None:
            return web.Response(status=403)
        return web.Response(headers={
            "Access-Control-Allow-Methods": "HEAD, GET, POST",
            "Access-Control-Allow-Headers": "Origin, Accept, Content-Type, X-Requested-With, X-Server-Time",
        })

    async def call(self, method: str, params, request_id, from_uri: bool = False, client: str = "") -> dict:
        """One JSON-RPC call, answered with a result or a CometBFT-style error object. `client` is the
        caller's `host:port`, which subscription limits count by."""
        if method not in METHODS:
            return _error(request_id, -32601, "Method not found", "")
        try:
            arguments = _bind(method, params, from_uri)
            if METHODS[method].takes_client:
                arguments["client"] = client
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
        answer = await self.call(method, dict(request.query), URI_REQUEST_ID, from_uri=True, client=_client_of(request))
        return web.json_response(answer, status=500 if "error" in answer else 200)

    async def _post(self, request: web.Request) -> web.Response:
        try:
            raw = await self._read_body(request)
        except _BodyError as exc:
            response = web.json_response(_error(None, -32600, "Invalid Request", str(exc)), status=400)
            response.force_close()  # what is left of the body is not read: the connection cannot carry on
            return response
        try:
            body = _decode_json(raw)
        except _Unparsable as exc:
            return web.json_response(_error(None, -32700, "Parse error", str(exc)))
        client = _client_of(request)
        if isinstance(body, list):
            if not body:
                return web.json_response(_error(None, -32600, "Invalid Request", "empty batch"))
            limit = self.limits.max_request_batch_size
            if limit and len(body) > limit:
                return web.json_response(_error(
                    None, -32600, "Invalid Request",
                    f"maximum JSON-RPC batch size exceeded, got: {len(body)}, max: {limit}"), status=400)
            return web.json_response([await self._one(item, client) for item in body])
        return web.json_response(await self._one(body, client))

    async def _one(self, item, client: str) -> dict:
        if not isinstance(item, dict) or not isinstance(item.get("method"), str):
            return _error(item.get("id") if isinstance(item, dict) else None, -32600, "Invalid Request", "a request needs a string method")
        return await self.call(item["method"], item.get("params"), item.get("id"), client=client)

    # --------------------------------------------------------------------------------------- websocket

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(heartbeat=30, max_msg_size=self.limits.max_body_bytes)
        await socket.prepare(request)
        self._sockets.add(socket)
        client = _client_of(request)
        subscriptions: dict[str, tuple] = {}  # query text -> (subscription, forwarding task)
        send_lock = asyncio.Lock()

        async def send(message: dict) -> None:
            async with send_lock:
                if not socket.closed:
                    try:
                        await asyncio.wait_for(socket.send_str(json.dumps(message)), self.limits.write_timeout)
                    except asyncio.TimeoutError:
                        log.info("closing a websocket whose client stopped reading (%s)", client)
                        if request.transport is not None:
                            request.transport.abort()
                    except (ConnectionError, RuntimeError):
                        pass  # the client went away; the read loop ends and cleans up

        try:
            async for message in socket:
                if message.type != WSMsgType.TEXT:
                    continue
                try:
                    item = _decode_json(message.data)
                except _Unparsable as exc:
                    await send(_error(None, -32700, "Parse error", str(exc)))
                    continue
                if not isinstance(item, dict) or not isinstance(item.get("method"), str):
                    await send(_error(None, -32600, "Invalid Request", "a request needs a string method"))
                    continue
                method, request_id = item["method"], item.get("id")
                if method in ("subscribe", "unsubscribe", "unsubscribe_all"):
                    await send(self._subscription_call(method, item.get("params"), request_id, subscriptions, send, client))
                else:
                    await send(await self.call(method, item.get("params"), request_id, client=client))
        finally:
            for subscription, task in subscriptions.values():
                self.node.events.unsubscribe(subscription)
                task.cancel()
            self._sockets.discard(socket)
        return socket

    def _subscription_call(self, method, params, request_id, subscriptions, send, client: str) -> dict:
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
        # CometBFT's order: the limits, then the query, then a duplicate.
        try:
            self.node.events.check_limits(client)
        except SubscriptionLimit as exc:
            return _error(request_id, -32603, "Internal error", str(exc))
        try:
            query = parse_query(text)
        except QueryError as exc:
            return _error(request_id, -32603, "Internal error", f"failed to parse query: {exc}")
        if text in subscriptions:
            return _error(request_id, -32603, "Internal error", "already subscribed")
        try:
            subscription = self.node.events.subscribe(query, client)
        except SubscriptionLimit as exc:
            return _error(request_id, -32603, "Internal error", str(exc))
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


def _client_of(request: web.Request) -> str:
    """The caller as CometBFT names a subscriber: its remote `host:port`."""
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else (request.remote or "")
