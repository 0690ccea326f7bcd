"""The load side of `benchmarks.network_throughput`: paced senders in their own processes, and a block observer.

Senders. Each sender is a process of its own (spawned once per run, fed one step at a time over a pipe), so
that submitting transactions is not limited by the one core an asyncio loop can use. A step is a list of
prepared transactions, a rate and a start time: transaction `i` is due at `start + i / rate` and goes out on
lane `i % lanes`, a keep-alive HTTP connection to endpoint `lane % len(endpoints)`; each lane sends its own
transactions one after another (`broadcast_tx_sync` answers after CheckTx), so a node that answers slowly
holds its lanes back and the step is not sustained. Requests are written as raw HTTP/1.1 bytes and the
answer's status and `code` are all that is read: the client's cost per transaction is a few system calls.
Everything is built before the clock starts: the request bodies arrive pre-encoded.

Observer. One websocket subscription to `tm.event='NewBlockHeader'` on one node: an event arrives once the
block is committed (CometBFT fires it after the app's Commit); the block's transactions are then fetched with
`block?height=` and every known one is stamped with the time its header event arrived. Transactions are
matched by their base64 text, the form the block's JSON carries.

All times are `time.monotonic()`, which is the same clock in every process of the machine.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from dataclasses import dataclass, field


# ------------------------------------------------------------------------------------------------- senders


@dataclass
class StepJob:
    """What one sender process sends in a step: `(index, lane, body)` with `lane` global over all senders."""

    endpoints: list[tuple[str, int]]
    start: float
    rate: float
    items: list[tuple[int, int, bytes]]


@dataclass
class SenderReport:
    """Per transaction `(index, submitted_at, accepted)`, and the sender's CPU seconds for the step."""

    sent: list[tuple[int, float, bool]]
    cpu_seconds: float
    errors: list[str] = field(default_factory=list)


def rpc_body(request_id: int, method: str, tx_base64: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                       "params": {"tx": tx_base64}}, separators=(",", ":")).encode()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response (Content-Length or chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, chunked = None, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if length is not None:
        return status, await reader.readexactly(length)
    if not chunked:
        raise ConnectionError("response with neither Content-Length nor chunked encoding")
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return status, body
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _accepted(status: int, body: bytes) -> bool:
    """A broadcast answered 200 with `code` 0 (CheckTx passed) and no JSON-RPC error."""
    if status != 200:
        return False
    answer = json.loads(body)
    return "error" not in answer and answer.get("result", {}).get("code") == 0


async def _lane(endpoint: tuple[str, int], items: list[tuple[int, bytes]], start: float, rate: float,
                sent: list, errors: list) -> None:
    host, port = endpoint
    prefix = (f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
              f"Content-Length: ").encode()
    reader = writer = None
    for index, body in items:
        due = start + index / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        submitted = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(prefix + str(len(body)).encode() + b"\r\n\r\n" + body)
            status, answer = await _read_response(reader)
            ok = _accepted(status, answer)
            if not ok and len(errors) < 5:
                errors.append(answer[:300].decode(errors="replace"))
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            ok = False
            if len(errors) < 5:
                errors.append(f"{type(exc).__name__}: {exc}")
            if writer is not None:
                writer.close()
            reader = writer = None
        sent.append((index, submitted, ok))
    if writer is not None:
        writer.close()


async def _run_job(job: StepJob) -> SenderReport:
    by_lane: dict[int, list[tuple[int, bytes]]] = {}
    for index, lane, body in job.items:
        by_lane.setdefault(lane, []).append((index, body))
    sent: list = []
    errors: list = []
    cpu = time.process_time()
    await asyncio.gather(*(
        _lane(job.endpoints[lane % len(job.endpoints)], items, job.start, job.rate, sent, errors)
        for lane, items in by_lane.items()
    ))
    return SenderReport(sent, time.process_time() - cpu, errors)


def _sender_main(connection) -> None:
    """A sender process: runs each job it receives and answers with its report; None ends it."""
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a project dependency
        loop = asyncio.new_event_loop()
    while True:
        job = connection.recv()
        if job is None:
            return
        connection.send(loop.run_until_complete(_run_job(job)))


class Senders:
    """`count` sender processes; `run(endpoints, items, rate, start)` splits a step between them by lane."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.connections = []
        self.processes = []
        for _ in range(count):
            parent, child = context.Pipe()
            process = context.Process(target=_sender_main, args=(child,), daemon=True)
            process.start()
            child.close()
            self.connections.append(parent)
            self.processes.append(process)

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def run(self, endpoints: list[tuple[str, int]], items: list[tuple[int, int, bytes]], rate: float,
            start: float) -> list[SenderReport]:
        count = len(self.connections)
        for number, connection in enumerate(self.connections):
            share = [item for item in items if item[1] % count == number]
            connection.send(StepJob(endpoints, start, rate, share))
        return [connection.recv() for connection in self.connections]

    def close(self) -> None:
        for connection in self.connections:
            try:
                connection.send(None)
            except OSError:
                pass
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


# ------------------------------------------------------------------------------------------------ observer


class BlockObserver:
    """Stamps each watched transaction with the time the block carrying it was committed on one node."""

    def __init__(self, rpc_url: str) -> None:
        self.rpc_url = rpc_url
        self.watched: dict[str, int] = {}  # base64 tx -> index
        self.committed: dict[int, float] = {}  # index -> commit time
        self.blocks: list[tuple[int, int, float]] = []  # (height, txs, time)
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self.failure: BaseException | None = None

    def watch(self, txs_base64: dict[str, int]) -> None:
        self.watched.update(txs_base64)

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait([ready, self._task], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.is_set():
            ready.cancel()
            raise RuntimeError(f"could not subscribe to new blocks at {self.rpc_url}: {self.failure}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the observer is done either way
                pass

    async def _run(self) -> None:
        import aiohttp

        try:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(self.rpc_url.replace("http", "ws", 1) + "/websocket",
                                              max_msg_size=0) as socket:
                    await socket.send_json({"jsonrpc": "2.0", "id": 0, "method": "subscribe",
                                            "params": {"query": "tm.event='NewBlockHeader'"}})
                    async for message in socket:
                        answer = json.loads(message.data)
                        if answer.get("id") == 0 and "result" in answer and not answer["result"]:
                            self._ready.set()
                            continue
                        header = answer.get("result", {}).get("data", {}).get("value", {}).get("header")
                        if header is not None:
                            await self._take_block(session, int(header["height"]), time.monotonic())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported by whoever waits on the observer
            self.failure = exc
            raise

    async def _take_block(self, session, height: int, seen_at: float) -> None:
        async with session.get(f"{self.rpc_url}/block", params={"height": str(height)}) as response:
            block = (await response.json(content_type=None))["result"]["block"]
        txs = block["data"]["txs"] or []
        for tx in txs:
            index = self.watched.pop(tx, None)
            if index is not None:
                self.committed[index] = seen_at
        self.blocks.append((height, len(txs), seen_at))
