"""A long pipeline of CheckTx on the mempool connection does not hold up the other connections: a consensus
request sent while a thousand and more CheckTx are queued is answered after a few of them, not after the
whole pipeline (the server lets the other connections take their turn every `YIELD_EVERY` requests), and a
pipeline of the most expensive transactions there are (`benchmarks/costly_txs.py`, 64 KiB each) lets it in after
each one (every `YIELD_BYTES`), although every byte of that pipeline is already buffered and reading it never
waits."""

from __future__ import annotations

import asyncio
import json

import pytest
from abci_helpers import CHAIN_ID, FakeStore, ServerProcess, genesis_bytes, key_for, send_tx

from benchmarks import costly_txs
from benchmarks.hostile_txs import CHAIN_ID as FUZZ_CHAIN_ID
from benchmarks.hostile_txs import KEYS, Signers, genesis_app_state
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.framing import FrameReader, encode_frame
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.server import YIELD_BYTES, YIELD_EVERY, AbciServer
from trolly.chain.proto import bank_pb2

SENDERS = 1500
AT_MOST_BETWEEN = 200
"""CheckTx answers allowed to arrive between sending the echo and its answer (a few turns of YIELD_EVERY; a
server serving the pipeline to its end first would let about a thousand through)."""


async def exchange(address: str, txs: list[bytes], funded: bytes) -> tuple[int, int]:
    host, port = address[len("tcp://"):].rsplit(":", 1)
    consensus_reader, consensus_writer = await asyncio.open_connection(host, int(port))
    mempool_reader, mempool_writer = await asyncio.open_connection(host, int(port))
    consensus, mempool = FrameReader(consensus_reader), FrameReader(mempool_reader)
    consensus_writer.write(encode_frame(abci.Request(init_chain=abci.RequestInitChain(
        chain_id=CHAIN_ID, initial_height=1, app_state_bytes=funded)).SerializeToString()))
    await consensus_writer.drain()
    await consensus.read()

    answered = [0]  # CheckTx answers received so far

    async def check_all() -> int:
        mempool_writer.write(b"".join(encode_frame(abci.Request(check_tx=abci.RequestCheckTx(tx=tx))
                                                   .SerializeToString()) for tx in txs))
        await mempool_writer.drain()
        accepted = 0
        for _ in txs:
            accepted += abci.Response.FromString(await mempool.read()).check_tx.code == 0
            answered[0] += 1
        return accepted

    async def echo() -> int:
        while answered[0] == 0:  # the pipeline is being served
            await asyncio.sleep(0.001)
        before = answered[0]
        consensus_writer.write(encode_frame(abci.Request(echo=abci.RequestEcho(message="m")).SerializeToString()))
        await consensus_writer.drain()
        assert abci.Response.FromString(await consensus.read()).echo.message == "m"
        return answered[0] - before

    accepted, between = await asyncio.gather(check_all(), echo())
    consensus_writer.close()
    mempool_writer.close()
    return accepted, between


@pytest.mark.slow
def test_a_consensus_request_is_answered_before_a_long_check_tx_pipeline_ends(tmp_path):
    keys = [key_for(1000 + index) for index in range(SENDERS)]
    recipient = key_for(1).address
    txs = [send_tx(key, recipient, 1, 0) for key in keys]
    server = ServerProcess(str(tmp_path / "db"), "tcp://127.0.0.1:0")
    try:
        accepted, between = asyncio.run(exchange(server.address, txs, genesis_bytes({key: 10 for key in keys})))
    finally:
        server.stop()
    assert accepted == SENDERS  # the pipeline was real work: every transfer checked and admitted
    assert between <= AT_MOST_BETWEEN


class RecordingApplication(TrollyApplication):
    """The real application, noting the order in which the server calls CheckTx and Echo."""

    def __init__(self) -> None:
        super().__init__(FakeStore())
        self.calls: list[str] = []
        self.init_chain(abci.RequestInitChain(chain_id=FUZZ_CHAIN_ID, initial_height=1,
                                              app_state_bytes=json.dumps(genesis_app_state()).encode()))

    def check_tx(self, request):
        self.calls.append("check_tx")
        return super().check_tx(request)

    def echo(self, request):
        self.calls.append("echo")
        return super().echo(request)


class Sink:
    """The writing half of a connection whose answers nobody reads; never makes the server wait."""

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


def buffered(requests: list[abci.Request]) -> asyncio.StreamReader:
    """A connection whose every request has already arrived: reading it never waits."""
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(encode_frame(request.SerializeToString()) for request in requests))
    reader.feed_eof()
    return reader


def calls_when_both_connections_are_full(txs: list[bytes]) -> list[str]:
    """Serve a mempool connection holding a CheckTx of each of `txs` and a consensus connection holding one Echo,
    both fully buffered, the mempool's first; the order in which the application was called."""
    app = RecordingApplication()
    server = AbciServer(app, "unix:///unused")

    async def serve_both() -> None:
        mempool = buffered([abci.Request(check_tx=abci.RequestCheckTx(tx=tx)) for tx in txs])
        consensus = buffered([abci.Request(echo=abci.RequestEcho(message="m"))])
        await asyncio.gather(server._serve_connection("mempool", mempool, Sink(), 1),
                             server._serve_connection("consensus", consensus, Sink(), 2))

    asyncio.run(serve_both())
    assert app.calls.count("check_tx") == len(txs)
    return app.calls


def test_a_consensus_request_waits_for_one_maximum_size_check_tx_not_a_pipeline_of_them():
    costly = Signers().sign(KEYS[0], costly_txs.costly_messages("many_keys"), fee=100_000, memo=costly_txs.MEMO)
    assert len(costly) > YIELD_BYTES
    calls = calls_when_both_connections_are_full([costly] * (2 * YIELD_EVERY))
    assert calls.index("echo") == 1


def test_a_consensus_request_waits_for_at_most_a_turn_of_small_check_tx():
    signers = Signers()
    transfers = [signers.sign(KEYS[index], [bank_pb2.MsgSend(to=KEYS[0].address, amount=1)], fee=100_000)
                 for index in range(1, 4 * YIELD_EVERY)]
    assert calls_when_both_connections_are_full(transfers).index("echo") == YIELD_EVERY
