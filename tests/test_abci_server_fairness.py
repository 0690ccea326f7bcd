"""A long pipeline of CheckTx on the mempool connection does not hold up the other connections: a consensus
request sent while a thousand and more CheckTx are queued is answered after a few of them, not after the
whole pipeline (the server lets the other connections take their turn every `YIELD_EVERY` requests)."""

from __future__ import annotations

import asyncio

import pytest
from abci_helpers import CHAIN_ID, ServerProcess, genesis_bytes, key_for, send_tx

from trolly.abci_app.framing import FrameReader, encode_frame
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci

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
