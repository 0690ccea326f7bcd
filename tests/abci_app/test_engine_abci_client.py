"""The engine's pipelined ABCI client against a scripted socket peer: responses pair with requests in order,
many requests can be in flight, a caller that gives up never desynchronises the connection, and broken or
misbehaving apps surface as AppConnectionLost / AppProtocolError."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from trolly.abci_app.engine import AppConnectionLost
from trolly.abci_app.engine.abci_client import AbciClient, AbciConnection, AppProtocolError, parse_address
from trolly.abci_app.framing import encode_frame, read_message
from trolly.abci_app.proto.tendermint.abci import types_pb2


class ScriptedApp:
    """A fake app on a unix socket: echoes, answers CheckTx with code = len(tx), and misbehaves on request."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.delay = 0.0
        self.misbehave: str | None = None  # "exception", "wrong_case", "hang_up"
        self.seen: list[str] = []
        self._server = None

    async def __aenter__(self):
        self._server = await asyncio.start_unix_server(self._serve, path=self.path)
        return self

    async def __aexit__(self, *exc_info):
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader, writer):
        try:
            while True:
                body = await read_message(reader)
                if body is None:
                    return
                request = types_pb2.Request.FromString(body)
                case = request.WhichOneof("value")
                self.seen.append(case)
                if case == "flush":
                    writer.write(encode_frame(types_pb2.Response(flush=types_pb2.ResponseFlush()).SerializeToString()))
                    await writer.drain()
                    continue
                if self.delay:
                    await asyncio.sleep(self.delay)
                if self.misbehave == "hang_up":
                    writer.close()
                    return
                if self.misbehave == "exception":
                    response = types_pb2.Response(exception=types_pb2.ResponseException(error="boom"))
                elif self.misbehave == "wrong_case" or case != "check_tx":
                    response = types_pb2.Response(echo=types_pb2.ResponseEcho(message=request.echo.message))
                else:
                    response = types_pb2.Response(check_tx=types_pb2.ResponseCheckTx(code=len(request.check_tx.tx)))
                writer.write(encode_frame(response.SerializeToString()))
        except (ConnectionError, asyncio.IncompleteReadError):
            return


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_pipelined_requests_pair_with_their_responses_in_order(tmp_path):
    async def scenario():
        async with ScriptedApp(str(tmp_path / "s")) as app:
            connection = await AbciConnection.open("mempool", f"unix://{tmp_path}/s")
            admitted: list[int] = []
            futures = [
                connection.send("check_tx", types_pb2.RequestCheckTx(tx=b"x" * n), lambda r: admitted.append(r.code))
                for n in range(1, 51)
            ]
            await connection.barrier()
            assert admitted == list(range(1, 51))  # callbacks ran in wire order, before the barrier returned
            assert [(await f).code for f in futures] == list(range(1, 51))
            assert app.seen.count("check_tx") == 50
            answers = await connection.call_many("check_tx", [types_pb2.RequestCheckTx(tx=b"ab"), types_pb2.RequestCheckTx(tx=b"")])
            assert [a.code for a in answers] == [2, 0]
            await connection.close()

    run(scenario())


def test_a_caller_that_gives_up_does_not_desynchronise_the_connection(tmp_path):
    async def scenario():
        async with ScriptedApp(str(tmp_path / "s")) as app:
            app.delay = 0.2
            connection = await AbciConnection.open("mempool", f"unix://{tmp_path}/s")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(connection.call("check_tx", types_pb2.RequestCheckTx(tx=b"abandoned")), 0.05)
            answer = await connection.call("check_tx", types_pb2.RequestCheckTx(tx=b"abc"))
            assert answer.code == 3  # not the abandoned request's 9
            await connection.close()

    run(scenario())


@pytest.mark.parametrize("misbehaviour, error", [("exception", AppProtocolError), ("wrong_case", AppProtocolError),
                                                 ("hang_up", AppConnectionLost)])
def test_misbehaving_app_fails_every_pending_request(tmp_path, misbehaviour, error):
    """The request the app answered wrongly fails with AppProtocolError; the ones behind it were never
    answered, so they fail as lost (the mempool sends them again on a new connection)."""
    async def scenario():
        async with ScriptedApp(str(tmp_path / "s")) as app:
            app.misbehave = misbehaviour
            connection = await AbciConnection.open("mempool", f"unix://{tmp_path}/s")
            first = connection.send("check_tx", types_pb2.RequestCheckTx(tx=b"a"))
            second = connection.send("check_tx", types_pb2.RequestCheckTx(tx=b"b"))
            with pytest.raises(error):
                await first
            with pytest.raises(AppConnectionLost):
                await second
            with pytest.raises(AppConnectionLost):
                connection.send("check_tx", types_pb2.RequestCheckTx(tx=b"c"))  # the connection stays down
            assert connection.down.is_set() and connection.broken
            await connection.close()

    run(scenario())


@pytest.mark.parametrize("write_error", [
    RuntimeError("unable to perform operation on <UnixTransport closed=True>; the handler is closed"),  # uvloop
    BrokenPipeError(32, "Broken pipe"),
])
def test_a_write_to_an_app_that_went_away_unnoticed_is_a_lost_connection(tmp_path, write_error):
    # The app dies between the reader's last read and the engine's next write: uvloop then refuses the write
    # with RuntimeError, before the reader has seen the end of input. That used to end the whole engine.
    async def scenario():
        async with ScriptedApp(str(tmp_path / "s")):
            connection = await AbciConnection.open("mempool", f"unix://{tmp_path}/s")

            def refuse(data):
                raise write_error

            connection._writer.write = refuse
            with pytest.raises(AppConnectionLost, match="failed during flush"):
                await connection.barrier()
            with pytest.raises(AppConnectionLost):
                connection.send("check_tx", types_pb2.RequestCheckTx(tx=b"c"))  # and it stays down
            await connection.close()

    uvloop.run(asyncio.wait_for(scenario(), 30))


def test_a_write_after_the_transport_closed_is_a_lost_connection(tmp_path):
    async def scenario():
        async with ScriptedApp(str(tmp_path / "s")):
            connection = await AbciConnection.open("mempool", f"unix://{tmp_path}/s")
            connection._writer.transport.close()
            with pytest.raises(AppConnectionLost):
                connection.send("check_tx", types_pb2.RequestCheckTx(tx=b"c"))
            await connection.close()

    uvloop.run(asyncio.wait_for(scenario(), 30))


def test_connecting_to_nothing_is_a_lost_connection(tmp_path):
    async def scenario():
        with pytest.raises(AppConnectionLost, match="cannot connect"):
            await AbciClient.connect(f"unix://{tmp_path}/nobody-listens")

    run(scenario())


@pytest.mark.parametrize("address, expected", [
    ("tcp://127.0.0.1:26658", ("tcp", ("127.0.0.1", 26658))),
    ("127.0.0.1:1", ("tcp", ("127.0.0.1", 1))),
    ("unix:///tmp/app.sock", ("unix", "/tmp/app.sock")),
])
def test_parse_address(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["tcp://nohost", "unix://", "tcp://:80", "http://x:y"])
def test_parse_address_rejects_malformed(address):
    with pytest.raises(Exception, match="invalid ABCI address"):
        parse_address(address)
