"""The engine's side of the ABCI socket: four connections to the app, as CometBFT v0.38 opens them.

CometBFT connects query, snapshot, mempool and consensus connections, in that order, to the same address
(`tcp://host:port` or `unix:///path`). Each request is written as one frame (`uvarint(len) || Request`),
followed by a Flush so the app sends its buffered responses; responses come back in order, one per request,
with the matching oneof case. A `Response.exception` or a mismatched case fails the request it answers with
`AppProtocolError` and closes the connection (it can no longer be trusted to stay in step); the requests
still pending on it fail with `AppConnectionLost`. A dropped connection raises `AppConnectionLost`.

What happens next depends on the connection. On the consensus connection an exception is fatal to the block
(the producer stops, as CometBFT does); a lost consensus connection makes the producer reconnect all four
and re-run the handshake. The mempool connection heals on its own: `AbciClient.reopen_mempool` replaces it
with a new connection and the producer re-checks the waiting transactions on it (CometBFT itself would stop;
the solo engine keeps accepting transactions).
"""

from __future__ import annotations

import asyncio
import collections
import logging

from google.protobuf.message import DecodeError

from ..listen_address import AddressError, parse_address as parse_listen_address
from ..framing import FramingError, encode_frame, read_message
from ..proto.tendermint.abci import types_pb2
from . import AppConnectionLost, EngineError

log = logging.getLogger("trolly.engine.abci")

CONNECTION_NAMES = ("query", "snapshot", "mempool", "consensus")


class AppProtocolError(EngineError):
    """The app answered with an exception or with a response that does not match the request."""


def parse_address(address: str) -> tuple[str, str | tuple[str, int]]:
    """("unix", path) or ("tcp", (host, port)) from `unix://PATH` or `tcp://HOST:PORT` (bare HOST:PORT too), by
    the rule the app's server listens by (`addresses.parse_address`)."""
    try:
        listen = parse_listen_address(address)
    except AddressError as exc:
        raise EngineError(f"invalid ABCI address {address!r}: {exc}") from None
    return ("unix", listen.path) if listen.scheme == "unix" else ("tcp", (listen.host, listen.port))


class AbciConnection:
    """One ABCI connection, pipelined as CometBFT's socket client is: requests are written at once and queued;
    a reader task pairs each response with the oldest pending request (the app answers in order).

    Many requests can be in flight, so the mempool does not wait a round trip per CheckTx. A caller that
    gives up (an HTTP client hanging up) leaves its request pending; the reader still consumes its answer,
    so later calls are never paired with the wrong response. An `on_response` callback runs inside the
    reader, before any later response is handled: the mempool admits txs there, in wire order.
    """

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.name = name
        self._reader = reader
        self._writer = writer
        self._pending: collections.deque = collections.deque()  # (method, future or None, callback or None)
        self._broken: str | None = None
        self.down = asyncio.Event()
        """Set once the connection is unusable (lost, or closed after a protocol error)."""
        self._reading = asyncio.ensure_future(self._read_loop())

    @property
    def broken(self) -> str | None:
        """Why the connection is unusable, or None while it works."""
        return self._broken

    @staticmethod
    async def open(name: str, address: str) -> "AbciConnection":
        kind, target = parse_address(address)
        try:
            if kind == "unix":
                reader, writer = await asyncio.open_unix_connection(target, limit=1 << 20)
            else:
                reader, writer = await asyncio.open_connection(*target, limit=1 << 20)
        except OSError as exc:
            raise AppConnectionLost(f"cannot connect the {name} connection to {address}: {exc}") from None
        return AbciConnection(name, reader, writer)

    def send(self, method: str, request, on_response=None) -> asyncio.Future:
        """Queue one request and a Flush; the future resolves to the typed response (e.g. ResponseInfo)."""
        if self._broken:
            raise AppConnectionLost(f"{self.name} connection is down: {self._broken}")
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(_consume_exception)
        self._pending.append((method, future, on_response))
        self._pending.append(("flush", None, None))
        self._write(encode_frame(types_pb2.Request(**{method: request}).SerializeToString()) + _FLUSH_FRAME, method)
        return future

    async def call(self, method: str, request) -> object:
        """Send one request and wait for its response."""
        future = self.send(method, request)
        await self._drain(method)
        return await future

    async def call_many(self, method: str, requests: list) -> list:
        """Pipeline many requests of one kind and return their responses in order."""
        futures = [self.send(method, request) for request in requests]
        await self._drain(method)
        return [await future for future in futures]

    async def barrier(self) -> None:
        """Wait until every request sent before now has been answered (and its callback has run)."""
        if self._broken:
            raise AppConnectionLost(f"{self.name} connection is down: {self._broken}")
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(_consume_exception)
        self._pending.append(("flush", future, None))
        self._write(_FLUSH_FRAME, "flush")
        await self._drain("flush")
        await future

    def _write(self, data: bytes, method: str) -> None:
        # The app can die between the reader's last read and this write: the transport is then closed before
        # the reader has seen the end of input. uvloop raises RuntimeError for a write to a closed transport
        # (asyncio's own transports drop it silently); either way the connection is lost, not the engine.
        try:
            if self._writer.is_closing():
                raise OSError("the transport is closed")
            self._writer.write(data)
        except (OSError, RuntimeError) as exc:
            lost = AppConnectionLost(f"{self.name} connection failed during {method}: {exc}")
            self._fail(lost)
            raise lost from None

    async def _drain(self, method: str) -> None:
        try:
            await self._writer.drain()
        except (OSError, ConnectionError) as exc:
            self._fail(AppConnectionLost(f"{self.name} connection failed during {method}: {exc}"))
            raise AppConnectionLost(f"{self.name} connection failed during {method}: {exc}") from None

    async def _read_loop(self) -> None:
        try:
            while True:
                body = await read_message(self._reader)
                if body is None:
                    raise OSError("the app closed the connection")
                response = types_pb2.Response.FromString(body)
                case = response.WhichOneof("value")
                if not self._pending:
                    raise AppProtocolError(f"the app sent {case!r} on the {self.name} connection with nothing pending")
                method, future, callback = self._pending[0]
                if case == "exception":
                    self._refuse_oldest(AppProtocolError(f"the app answered {method} with an exception: {response.exception.error}"))
                    return
                if case != method:
                    self._refuse_oldest(AppProtocolError(f"the app answered {method} with {case!r}"))
                    return
                self._pending.popleft()
                value = getattr(response, method)
                if callback is not None:
                    callback(value)
                if future is not None and not future.done():
                    future.set_result(value)
        except AppProtocolError as exc:
            self._fail(exc)
        except (OSError, FramingError, asyncio.IncompleteReadError, DecodeError) as exc:
            method = self._pending[0][0] if self._pending else "a read"
            self._fail(AppConnectionLost(f"{self.name} connection failed during {method}: {exc or type(exc).__name__}"))
        except asyncio.CancelledError:
            self._fail(AppConnectionLost(f"{self.name} connection closed"))
            raise

    def _refuse_oldest(self, error: AppProtocolError) -> None:
        """The app answered the oldest pending request wrongly: that request fails with `error` (it is the one
        the app could not handle), the connection closes, and the requests behind it fail as lost (they were
        never answered, so they can be sent again on a new connection)."""
        self._broken = str(error)
        _, future, _ = self._pending.popleft()
        if future is not None and not future.done():
            future.set_exception(error)
        self._fail(AppConnectionLost(f"{self.name} connection closed after a protocol error: {error}"))

    def _fail(self, error: Exception) -> None:
        """Mark the connection broken and fail every pending request with `error`."""
        if self._broken is None:
            self._broken = str(error)
        while self._pending:
            _, future, _ = self._pending.popleft()
            if future is not None and not future.done():
                future.set_exception(error)
        self._writer.close()
        self.down.set()

    async def close(self) -> None:
        self._reading.cancel()
        try:
            await self._reading
        except asyncio.CancelledError:
            pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ConnectionError):
            pass


def _consume_exception(future: asyncio.Future) -> None:
    """A request nobody awaits any more may fail; that is not worth an "exception never retrieved" log."""
    if not future.cancelled():
        future.exception()


_FLUSH_FRAME = encode_frame(types_pb2.Request(flush=types_pb2.RequestFlush()).SerializeToString())


class AbciClient:
    """The four connections, with one method per ABCI call the engine makes."""

    def __init__(self, connections: dict[str, AbciConnection], address: str = "") -> None:
        self._connections = connections
        self.address = address

    @staticmethod
    async def connect(address: str) -> "AbciClient":
        connections: dict[str, AbciConnection] = {}
        try:
            for name in CONNECTION_NAMES:
                connections[name] = await AbciConnection.open(name, address)
        except BaseException:
            for connection in connections.values():
                await connection.close()
            raise
        return AbciClient(connections, address)

    @staticmethod
    async def connect_with_retry(address: str, stop: asyncio.Event | None = None, interval: float = 0.2) -> "AbciClient":
        """Keep trying until the app listens (or `stop` is set, which raises AppConnectionLost)."""
        announced = False
        while True:
            try:
                return await AbciClient.connect(address)
            except AppConnectionLost as exc:
                if stop is not None and stop.is_set():
                    raise
                if not announced:
                    log.info("waiting for the app at %s (%s)", address, exc)
                    announced = True
            await asyncio.sleep(interval)

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()

    # mempool connection: its health, and replacing it when it fails

    @property
    def mempool_down(self) -> str | None:
        """Why the mempool connection is unusable, or None while it works."""
        return self._connections["mempool"].broken

    async def wait_mempool_down(self) -> None:
        """Return once the current mempool connection is unusable."""
        await self._connections["mempool"].down.wait()

    async def reopen_mempool(self) -> None:
        """Replace the mempool connection with a new one to the same address (AppConnectionLost if the app does
        not answer). The caller re-checks the waiting transactions on it before any new CheckTx: the app drops
        its mempool state when a new mempool connection starts (see `AbciServer`)."""
        old = self._connections["mempool"]
        await old.close()
        self._connections["mempool"] = await AbciConnection.open("mempool", self.address)
        log.info("mempool connection re-established (it had failed: %s)", old.broken or "closed")

    def send_check_tx(self, tx: bytes, on_response) -> asyncio.Future:
        """Queue a CheckTx (NEW) on the mempool connection; `on_response` runs as soon as it is answered."""
        return self._connections["mempool"].send("check_tx", types_pb2.RequestCheckTx(tx=tx, type=types_pb2.NEW), on_response)

    async def flush_mempool_connection(self) -> None:
        """Every CheckTx sent so far is answered and admitted (CometBFT's FlushAppConn before Commit)."""
        await self._connections["mempool"].barrier()

    async def recheck_txs(self, txs: list[bytes]) -> list:
        """CheckTx (RECHECK) for each tx, pipelined; one outcome per tx, in order: its ResponseCheckTx, an
        `AppProtocolError` if the app answered it with an exception, or an `AppConnectionLost` if the connection
        failed before it was answered (it was not judged)."""
        connection = self._connections["mempool"]
        futures: list[asyncio.Future] = []
        try:
            for tx in txs:
                futures.append(connection.send("check_tx", types_pb2.RequestCheckTx(tx=tx, type=types_pb2.RECHECK)))
            await connection._drain("check_tx")
        except AppConnectionLost:
            pass  # the futures already sent carry their own outcome; the rest were never sent
        outcomes: list = []
        for future in futures:
            try:
                outcomes.append(await future)
            except (AppProtocolError, AppConnectionLost) as exc:
                outcomes.append(exc)
        unsent = AppConnectionLost(f"mempool connection is down: {connection.broken}")
        return outcomes + [unsent] * (len(txs) - len(futures))

    # query connection (the handshake's Info goes here, as in CometBFT)
    async def info(self, request: types_pb2.RequestInfo) -> types_pb2.ResponseInfo:
        return await self._connections["query"].call("info", request)

    # consensus connection
    async def init_chain(self, request: types_pb2.RequestInitChain) -> types_pb2.ResponseInitChain:
        return await self._connections["consensus"].call("init_chain", request)

    async def prepare_proposal(self, request: types_pb2.RequestPrepareProposal) -> types_pb2.ResponsePrepareProposal:
        return await self._connections["consensus"].call("prepare_proposal", request)

    async def process_proposal(self, request: types_pb2.RequestProcessProposal) -> types_pb2.ResponseProcessProposal:
        return await self._connections["consensus"].call("process_proposal", request)

    async def extend_vote(self, request: types_pb2.RequestExtendVote) -> types_pb2.ResponseExtendVote:
        return await self._connections["consensus"].call("extend_vote", request)

    async def finalize_block(self, request: types_pb2.RequestFinalizeBlock) -> types_pb2.ResponseFinalizeBlock:
        return await self._connections["consensus"].call("finalize_block", request)

    async def commit(self) -> types_pb2.ResponseCommit:
        return await self._connections["consensus"].call("commit", types_pb2.RequestCommit())

    # mempool connection
    async def check_tx(self, tx: bytes, recheck: bool = False) -> types_pb2.ResponseCheckTx:
        kind = types_pb2.RECHECK if recheck else types_pb2.NEW
        return await self._connections["mempool"].call("check_tx", types_pb2.RequestCheckTx(tx=tx, type=kind))

    async def query(self, request: types_pb2.RequestQuery) -> types_pb2.ResponseQuery:
        return await self._connections["query"].call("query", request)

    async def echo(self, message: str) -> str:
        return (await self._connections["query"].call("echo", types_pb2.RequestEcho(message=message))).message
