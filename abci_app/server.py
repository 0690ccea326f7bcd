"""The ABCI socket server: CometBFT (or the solo engine) connects here and drives the application.

CometBFT opens four connections to the same address (query, snapshot, mempool, consensus). Each is served
by its own read loop: read a frame, decode a `Request`, call the application method named by its oneof
case, write the `Response` with the same case. Responses therefore go out in request order, one per
request; `Flush` is answered only after every earlier response has been written and the writer drained.
All connections share one application on one event loop, and application methods are synchronous, so
calls never interleave (CometBFT's own socket server holds a global lock for the same reason).

Failures, from least to most serious:
- a malformed frame, an oversize message or bytes that are not a `Request` close *that* connection with a
  log line; the server and the other connections carry on, and the application is never called;
- an `AbciAppError` from the application (an invalid genesis, calls out of order) is answered with an
  ABCI `exception` and logged without a traceback: CometBFT stops, which is the only safe outcome;
- any other exception is a bug: answered with `exception` and logged with its traceback.

CheckTx is expected on one connection at a time, as CometBFT sends it (its mempool connection). When it
starts coming on a newer connection, the engine has replaced a failed mempool connection: the application
drops its mempool state (`on_mempool_connection_replaced`) because the engine re-checks its waiting
transactions on the new connection next, and a CheckTx still arriving on the replaced connection closes it.

Where it listens: a unix socket by default, created with mode 0600 so that only the node's own user can drive
the application (`bind_private_unix_socket`: the socket is bound in a fresh 0700 directory, given mode 0600
there and renamed into place, so there is no moment at which another user could connect). TCP only when the
address asks for it (`tcp://host:port`), as a CometBFT home's `proxy_app` may.

Lifecycle: `AbciServer.start()` binds, `serve_forever()` waits, `stop()` closes the listener and
every connection. Signal handlers live only in `main()`. The node CLI calls `serve(app, address)`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import tempfile
from typing import Any

from google.protobuf.message import DecodeError


from .listen_address import MAX_UNIX_PATH_BYTES, AddressError, default_unix_address, parse_address
from .errors import AbciAppError
from .framing import MAX_MESSAGE_BYTES, FrameReader, FramingError, encode_frame
from .proto.tendermint.abci import types_pb2 as abci

log = logging.getLogger("trolly.abci.server")

UNIX_SOCKET_MODE = 0o600
"""Only the node's own user may connect to the application's unix socket."""

YIELD_EVERY = 8
"""Requests served in a row before the connection lets the others take their turn."""

YIELD_BYTES = 16 * 1024
"""Request bytes served in a row before the connection lets the others take their turn, however few the requests.
Every check of a request is linear in its bytes, so bytes bound the work: a pipeline of large CheckTx (task specs
of the maximum size) lets a consensus call in after each one instead of after `YIELD_EVERY` of them."""

APPLICATION_METHODS = (
    "echo", "info", "init_chain", "query", "check_tx", "commit", "list_snapshots", "offer_snapshot",
    "load_snapshot_chunk", "apply_snapshot_chunk", "prepare_proposal", "process_proposal", "extend_vote",
    "verify_vote_extension", "finalize_block",
)
"""Request cases answered by the application method of the same name (`flush` is the server's own)."""


def bind_private_unix_socket(path: str, backlog: int = 100) -> socket.socket:
    """A listening unix socket at `path` with mode 0600.

    The socket is bound inside a fresh private directory beside `path` (mkdtemp makes it 0700), given mode
    0600 there and renamed onto `path`: no other user can connect at any moment, and no process-wide umask
    is touched. A stale socket left by a killed run is replaced; a socket some process still listens on, or
    a file that is not a socket, is refused with AddressError.
    """
    if len(os.fsencode(path)) > MAX_UNIX_PATH_BYTES:
        raise AddressError(f"unix socket path {path} is longer than {MAX_UNIX_PATH_BYTES} bytes")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise AddressError(f"cannot listen on unix://{path}: the directory {directory} does not exist")
    _refuse_to_replace(path)
    private = tempfile.mkdtemp(prefix=".abci-", dir=directory)
    staging = os.path.join(private, "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(staging)) > MAX_UNIX_PATH_BYTES:
            raise AddressError(f"cannot listen on unix://{path}: the directory path is too long to create the "
                               f"socket privately first ({staging}); use a shorter path")
        listener.bind(staging)
        os.chmod(staging, UNIX_SOCKET_MODE)
        os.replace(staging, path)
        listener.listen(backlog)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        raise
    finally:
        os.rmdir(private)
    return listener


def _refuse_to_replace(path: str) -> None:
    """AddressError if `path` is something other than a stale socket (a live one, or not a socket at all)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise AddressError(f"cannot listen on unix://{path}: a file that is not a socket is in the way")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return  # nobody listens: a stale socket from a killed run
    raise AddressError(f"cannot listen on unix://{path}: another process is listening there")


class AbciServer:
    """Serves one application to any number of ABCI connections."""

    def __init__(self, app: Any, address: str, max_message_bytes: int = MAX_MESSAGE_BYTES):
        self.app = app
        self.address = parse_address(address)
        self.max_message_bytes = max_message_bytes
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task] = set()
        self._next_connection = 0
        self._mempool_connection = 0  # number of the connection CheckTx last came on (0: none yet)
        for method in APPLICATION_METHODS:
            if not callable(getattr(app, method, None)):
                raise TypeError(f"{type(app).__name__} lacks the ABCI method {method}()")

    @property
    def bound_address(self) -> str:
        """The address actually listened on (resolves port 0 to the port the OS picked)."""
        if self._server is None or self.address.scheme == "unix":
            return str(self.address)
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"tcp://{host}:{port}"

    async def start(self) -> None:
        if self.address.scheme == "unix":
            listener = bind_private_unix_socket(self.address.path)
            self._server = await asyncio.start_unix_server(self._on_connection, sock=listener)
        else:
            self._server = await asyncio.start_server(self._on_connection, self.address.host, self.address.port)
        log.info("ABCI server listening on %s", self.bound_address)

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        await self._server.serve_forever()

    async def stop(self) -> None:
        """Stop accepting, close every connection, wait for their loops to end."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.address.scheme == "unix":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address.path)
        log.info("ABCI server stopped")

    # -- one connection ---------------------------------------------------------------------------------------
    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        self._next_connection += 1
        number = self._next_connection
        name = f"abci#{number}"
        peer = writer.get_extra_info("peername") or "unix socket"
        log.info("%s: connection from %s", name, peer)
        try:
            await self._serve_connection(name, reader, writer, number)
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError) as exc:
            log.info("%s: connection lost: %s", name, exc)
        except Exception:  # a bug in the server itself: lose this connection, never the server
            log.exception("%s: closing connection after an unexpected error", name)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if not self._connections:
                self._consensus_engine_gone()

    def _consensus_engine_gone(self) -> None:
        """Every connection is closed: the engine stopped or crashed, and its mempool went with it. When it
        comes back it re-sends what it needs (Info, then blocks or CheckTx), so the app drops what it kept for
        the old session (see `TrollyApplication.on_all_connections_closed`)."""
        hook = getattr(self.app, "on_all_connections_closed", None)
        if hook is not None:
            log.info("all ABCI connections closed")
            hook()

    def _is_current_mempool_connection(self, name: str, number: int) -> bool:
        """CheckTx came on connection `number`. A newer connection than the last one CheckTx came on means the
        engine replaced a failed mempool connection and is about to re-check its waiting txs on the new one:
        the app drops the mempool state those txs were admitted into (or they would look like replays).
        CheckTx on an older connection comes from the replaced one: False, and that connection is closed."""
        if number < self._mempool_connection:
            log.warning("%s: closing connection: CheckTx on a mempool connection that abci#%d replaced",
                        name, self._mempool_connection)
            return False
        if number > self._mempool_connection:
            if self._mempool_connection:
                log.info("%s: new mempool connection (replacing abci#%d)", name, self._mempool_connection)
            self._mempool_connection = number
            hook = getattr(self.app, "on_mempool_connection_replaced", None)
            if hook is not None:
                hook()
        return True

    async def _serve_connection(self, name: str, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter, number: int = 0) -> None:
        frames = FrameReader(reader, self.max_message_bytes)
        # The responses to a pipelined batch (every request already in the buffer) go out in one write: a
        # write per response costs a system call and a wake-up of the engine's reader for each one.
        pending: list[bytes] = []
        served = served_bytes = 0  # requests and their bytes since this connection last let the others in
        while True:
            try:
                frame = await frames.read()
            except FramingError as error:
                writer.write(b"".join(pending))
                log.warning("%s: closing connection: %s", name, error)
                return
            if frame is None:
                log.info("%s: closed by peer", name)
                return
            request = decode_request(frame)
            if request is None:
                writer.write(b"".join(pending))
                log.warning("%s: closing connection: %d bytes are not an ABCI v0.38 Request", name, len(frame))
                return
            case = request.WhichOneof("value")
            if case == "flush":
                # Every earlier response goes before the flush's; drain them all, then go on.
                pending.append(FLUSH_FRAME)
                writer.write(b"".join(pending))
                pending.clear()
                await writer.drain()
                continue
            if case == "check_tx" and not self._is_current_mempool_connection(name, number):
                writer.write(b"".join(pending))
                return
            pending.append(encode_frame(self.dispatch(name, case, request).SerializeToString()))
            served += 1
            served_bytes += len(frame)
            if not frames.buffered():  # end of a pipelined batch: write it, apply back-pressure once
                writer.write(b"".join(pending))
                pending.clear()
                await writer.drain()
            if served >= YIELD_EVERY or served_bytes >= YIELD_BYTES:
                # A long pipeline (the mempool's CheckTx and re-checks) would otherwise hold the event loop until
                # it ends, and reading it does not wait while its bytes are already buffered, nor does a drain
                # below the high-water mark; the other connections (a consensus call waiting on the proposal, a
                # vote extension, the block) get their turn after every few requests or kilobytes of it. A
                # batch's answers still go out in one write when it ends: a write per turn costs a system call.
                served = served_bytes = 0
                await asyncio.sleep(0)

    def dispatch(self, name: str, case: str, request: abci.Request) -> abci.Response:
        """Call the application for one request; an exception becomes an ABCI `exception` response."""
        try:
            result = getattr(self.app, case)(getattr(request, case))
            response = abci.Response()
            getattr(response, case).CopyFrom(result)
            return response
        except AbciAppError as error:
            log.error("%s: %s refused: %s", name, case, error)
            return abci.Response(exception=abci.ResponseException(error=f"{case}: {error}"))
        except Exception as error:  # a bug: report it to the engine (which halts) and keep the traceback
            log.exception("%s: bug while handling %s", name, case)
            return abci.Response(exception=abci.ResponseException(error=f"{case}: {type(error).__name__}: {error}"))


FLUSH_FRAME = encode_frame(abci.Response(flush=abci.ResponseFlush()).SerializeToString())

_KNOWN_CASES = frozenset(APPLICATION_METHODS) | {"flush"}


def decode_request(frame: bytes) -> abci.Request | None:
    """The Request in `frame`, or None when it is not one (undecodable, or no known oneof case set)."""
    try:
        request = abci.Request.FromString(frame)
    except (DecodeError, ValueError, RuntimeError):
        return None
    return request if request.WhichOneof("value") in _KNOWN_CASES else None


async def serve(app: Any, address: str, ready: asyncio.Event | None = None) -> None:
    """Serve `app` on `address` until cancelled; then close every connection. Used by `trolly-node start`."""
    server = AbciServer(app, address)
    await server.start()
    if ready is not None:
        ready.set()
    try:
        await server.serve_forever()
    finally:
        await server.stop()


# -- `python -m trolly.abci_app.server`: the app alone, waiting for CometBFT -------------------------------------
def _parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trolly.abci_app.server",
        description="Run the Trolly ABCI application alone, waiting for CometBFT (or the solo engine).",
    )
    parser.add_argument("--db", required=True, help="directory of the application's LevelDB state")
    parser.add_argument("--address", default=None,
                        help="unix://path (mode 0600) or tcp://host:port; default: unix://DB/../app.sock")
    parser.add_argument("--chain-id", default=None, help="chain id to assume before InitChain (optional)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--signature-checker", choices=("on", "off"), default="on",
                        help="check large unchecked blocks' signatures in a helper process (default on)")
    return parser.parse_args(argv)


async def run_until_signalled(app: Any, address: str) -> None:
    """Serve until SIGINT or SIGTERM, then stop cleanly."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    server = AbciServer(app, address)
    await server.start()
    print(f"ABCI server listening on {server.bound_address}", flush=True)
    serving = asyncio.create_task(server.serve_forever())
    await stopping.wait()
    log.info("signal received, stopping")
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    await server.stop()


def main(argv: list[str] | None = None) -> None:
    import uvloop

    from trolly.chain.checked_txs import CheckedTxs

    from .application import TrollyApplication
    from .gc_tuning import tune_garbage_collection
    from .signature_checker import SignatureChecker
    from .store import Store

    arguments = _parse_arguments(argv)
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        address = arguments.address or default_unix_address(os.path.dirname(os.path.abspath(arguments.db)))
        parse_address(address)
    except AddressError as exc:
        raise SystemExit(f"error: {exc}") from None
    store = Store(arguments.db)
    checker = SignatureChecker(enabled=arguments.signature_checker == "on")
    app = TrollyApplication(store, arguments.chain_id, checks=CheckedTxs(), signature_checker=checker)
    try:
        checker.start()  # now, so that the first large block finds it ready
        tune_garbage_collection()  # as `trolly-node start` runs the app
        uvloop.run(run_until_signalled(app, address))
    except AddressError as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        checker.close()
        store.close()


if __name__ == "__main__":
    main()
