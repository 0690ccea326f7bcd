"""The ABCI socket: a unix socket with mode 0600 by default, created with no moment at which another user
could connect; TCP only when an address asks for it; and the server's switch to a replaced mempool
connection (the engine re-opens a failed one and re-checks its mempool on the new one)."""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
import stat
import subprocess
import sys
import tempfile

import pytest
from abci_helpers import FakeStore, send_tx
from click.testing import CliRunner
from engine_helpers import wait_until
from test_abci_server import ALICE, BOB, RunningServer, start_chain

import abci_wire_client as wire
from trolly.abci_app import cli
from trolly.abci_app import home as homelib
from trolly.abci_app import server as server_module
from trolly.abci_app.listen_address import AddressError, default_unix_address, unix_socket_fits
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.server import AbciServer, bind_private_unix_socket


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_socket_gets_mode_0600_even_under_a_permissive_umask(tmp_path):
    previous = os.umask(0)
    try:
        listener = bind_private_unix_socket(str(tmp_path / "app.sock"))
    finally:
        os.umask(previous)
    try:
        assert stat.S_ISSOCK(os.stat(tmp_path / "app.sock").st_mode)
        assert mode_of(tmp_path / "app.sock") == 0o600
        assert sorted(os.listdir(tmp_path)) == ["app.sock"]  # the private staging directory is gone
    finally:
        listener.close()


def test_the_socket_is_0600_in_a_private_directory_before_it_appears_at_its_path(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def checking_replace(source, destination):
        seen.append((mode_of(source), mode_of(os.path.dirname(source)), os.path.exists(destination)))
        real_replace(source, destination)

    monkeypatch.setattr(server_module.os, "replace", checking_replace)
    previous = os.umask(0)
    try:
        listener = bind_private_unix_socket(str(tmp_path / "app.sock"))
    finally:
        os.umask(previous)
    listener.close()
    assert seen == [(0o600, 0o700, False)]


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _connects_as(user: pwd.struct_passwd, path: str) -> bool:
    """Fork, become `user` in the child, try to connect; the child exits 0 on success, 3 when refused."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(path)
            code = 0
        except PermissionError:
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 3), f"the probe failed in another way (exit {code})"
    return code == 0


@pytest.mark.skipif(os.geteuid() != 0 or _nobody() is None,
                    reason="needs root (to run a probe as another user) and a `nobody` user")
def test_another_user_cannot_connect_to_the_app_socket():
    directory = tempfile.mkdtemp(prefix="abci-perm-")
    try:
        os.chmod(directory, 0o755)  # traversable by anyone: only the socket's own mode stands in the way
        path = os.path.join(directory, "app.sock")
        listener = bind_private_unix_socket(path)
        try:
            assert not _connects_as(_nobody(), path)
            os.chmod(path, 0o666)  # the control: the same probe connects once the mode allows it
            assert _connects_as(_nobody(), path)
        finally:
            listener.close()
    finally:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)


def test_a_stale_socket_is_replaced_but_a_live_one_or_a_regular_file_is_refused(tmp_path):
    path = str(tmp_path / "app.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: a killed run's leftover
    live = bind_private_unix_socket(path)
    try:
        with pytest.raises(AddressError, match="another process is listening"):
            bind_private_unix_socket(path)
    finally:
        live.close()
    regular = tmp_path / "notes.txt"
    regular.write_text("keep me")
    with pytest.raises(AddressError, match="not a socket"):
        bind_private_unix_socket(str(regular))
    assert regular.read_text() == "keep me"


def test_socket_paths_too_long_or_in_a_missing_directory_are_refused(tmp_path):
    with pytest.raises(AddressError, match="longer than"):
        bind_private_unix_socket(str(tmp_path / ("x" * 120)))
    with pytest.raises(AddressError, match="does not exist"):
        bind_private_unix_socket(str(tmp_path / "missing" / "app.sock"))
    with pytest.raises(AddressError, match="unix://SHORTER_PATH or tcp://HOST:PORT"):
        default_unix_address(tmp_path / ("d" * 120))


def test_a_socket_path_fits_only_when_its_private_staging_path_fits_too():
    directory = "/" + "d" * 80
    fits = f"{directory}/app.sock"  # 89 bytes; staging beside it, 97
    assert unix_socket_fits(fits) and len(fits) <= 107
    deeper = "/" + "d" * 95 + "/app.sock"  # 105 bytes: a socket address, but its staging path (113) is not
    assert len(deeper) <= 107 and not unix_socket_fits(deeper)
    with pytest.raises(AddressError, match="unix://SHORTER_PATH or tcp://HOST:PORT"):
        default_unix_address("/" + "d" * 95)


def test_abci_server_listens_on_a_0600_unix_socket_and_removes_it_on_stop(tmp_path):
    async def scenario():
        server = AbciServer(TrollyApplication(FakeStore()), f"unix://{tmp_path}/app.sock")
        previous = os.umask(0)  # a permissive umask must not widen the socket's mode
        try:
            await server.start()
        finally:
            os.umask(previous)
        try:
            assert mode_of(tmp_path / "app.sock") == 0o600
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "app.sock"))
            writer.close()
        finally:
            await server.stop()
        assert not (tmp_path / "app.sock").exists()

    asyncio.run(scenario())


def test_init_writes_the_home_unix_socket_as_proxy_app_unless_told_otherwise(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli.main, ["init", "--home", str(tmp_path / "a"), "--chain-id", "socket-test"])
    assert result.exit_code == 0, result.output
    assert homelib.load_home(tmp_path / "a").config["proxy_app"] == f"unix://{tmp_path}/a/data/app.sock"
    result = runner.invoke(cli.main, ["init", "--home", str(tmp_path / "b"), "--chain-id", "socket-test",
                                      "--proxy-app", "tcp://127.0.0.1:26658"])
    assert result.exit_code == 0, result.output
    assert homelib.load_home(tmp_path / "b").config["proxy_app"] == "tcp://127.0.0.1:26658"


def test_init_with_a_home_too_deep_for_a_socket_fails_clearly(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    result = CliRunner().invoke(cli.main, ["init", "--home", str(deep), "--chain-id", "socket-test"])
    assert result.exit_code != 0 and "longer than a unix socket allows" in result.output
    assert not (deep / "config").exists()


@pytest.mark.slow
def test_a_bare_trolly_node_start_listens_on_a_0600_unix_socket_in_the_home(tmp_path):
    root = tmp_path / "h"
    assert CliRunner().invoke(cli.main, ["init", "--home", str(root), "--chain-id", "socket-test"]).exit_code == 0
    app = subprocess.Popen([sys.executable, "-m", "trolly.abci_app.cli", "start", "--home", str(root)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        path = root / "data" / "app.sock"
        wait_until(path.exists, 30, what="the app socket")
        assert mode_of(path) == 0o600
        client = wire.CometLikeClient(f"unix://{path}")
        assert client.info().int(4) == 0  # last_block_height: the app answers on it
        client.close()
    finally:
        app.terminate()
        output, _ = app.communicate(timeout=30)
    assert f"listening on unix://{root}/data/app.sock" in output


@pytest.mark.slow
def test_the_server_module_defaults_to_a_0600_socket_beside_its_database(tmp_path):
    app = subprocess.Popen([sys.executable, "-m", "trolly.abci_app.server", "--db", str(tmp_path / "state.db")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until((tmp_path / "app.sock").exists, 30, what="the app socket")
        assert mode_of(tmp_path / "app.sock") == 0o600
    finally:
        app.terminate()
        app.communicate(timeout=30)


# ---------------------------------------------------------------------- a replaced mempool connection


def test_a_newer_mempool_connection_resets_the_overlay_and_the_replaced_one_is_closed():
    running = RunningServer(TrollyApplication(FakeStore()), "tcp://127.0.0.1:0")
    try:
        client = wire.CometLikeClient(running.address)
        start_chain(client)
        tx = send_tx(ALICE, BOB.address, 5, 0)
        assert client.check_tx(tx).code == 0
        assert client.check_tx(tx).code != 0  # the overlay holds it: a replay
        replacement = wire.Connection(running.address)  # the engine re-opened its mempool connection
        assert wire.tx_outcome(replacement.call(wire.check_tx(tx, True))[0]).code == 0  # re-check from scratch
        assert wire.tx_outcome(replacement.call(wire.check_tx(tx))[0]).code != 0
        with pytest.raises((ConnectionError, OSError, wire.ProtocolError)):
            client.check_tx(send_tx(ALICE, BOB.address, 6, 1))  # the replaced connection is closed unanswered
        assert client.info().int(4) == 1  # the other connections carry on
        replacement.close()
        client.close()
    finally:
        running.stop()
