"""The one atomic file writer (`trolly.wallet.files`): the order of its system calls, what a failure leaves,
and that every durable file the project writes goes through it."""

from __future__ import annotations

import ast
import errno
import os
import pathlib
import stat

import pytest

from file_helpers import CallLog
from trolly.wallet import files
from trolly.wallet.files import FILE_MODE, make_directories, write_atomically, write_private_file

ROOT = pathlib.Path(__file__).resolve().parents[2]


def leftovers(directory: pathlib.Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(files.TEMPORARY_SUFFIX))


def test_an_atomic_write_creates_exclusively_with_0600_writes_fsyncs_renames_then_fsyncs_the_directory(
        tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    log = CallLog(monkeypatch)
    write_atomically(target, b"new contents")
    monkeypatch.undo()

    assert log.kinds() == ["open", "write", "fsync", "replace", "open", "fsync"]
    _, temporary, flags, mode = log.calls[0]
    assert flags & os.O_CREAT and flags & os.O_EXCL and mode == 0o600
    assert pathlib.Path(temporary).parent == tmp_path and temporary != str(target)
    assert log.calls[1] == ("write", temporary) and log.calls[2] == ("fsync", temporary)
    assert log.calls[3] == ("replace", temporary, str(target))
    assert log.calls[4][1] == str(tmp_path) and log.calls[4][2] & os.O_DIRECTORY
    assert log.calls[5] == ("fsync", str(tmp_path))
    assert target.read_bytes() == b"new contents" and leftovers(tmp_path) == []
    assert stat.S_IMODE(target.stat().st_mode) == FILE_MODE


def test_an_exclusive_write_links_instead_of_renaming_and_refuses_an_existing_file(tmp_path, monkeypatch):
    target = tmp_path / "key.json"
    log = CallLog(monkeypatch)
    write_atomically(target, b"first", exclusive=True)
    monkeypatch.undo()
    assert log.kinds() == ["open", "write", "fsync", "link", "open", "fsync"]
    with pytest.raises(FileExistsError):
        write_atomically(target, b"second", exclusive=True)
    assert target.read_bytes() == b"first" and leftovers(tmp_path) == []


def test_a_public_file_gets_its_mode_only_once_complete(tmp_path, monkeypatch):
    target = tmp_path / "genesis.json"
    log = CallLog(monkeypatch)
    write_atomically(target, b"{}", mode=0o644)
    monkeypatch.undo()
    assert log.calls[0][3] == 0o600  # created private, made public just before the fsync and the rename
    assert log.kinds() == ["open", "write", "fchmod", "fsync", "replace", "open", "fsync"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
def test_a_failure_midway_leaves_the_old_file_intact_and_no_temporary_behind(tmp_path, monkeypatch, failing):
    target = tmp_path / "state.json"
    write_atomically(target, b"old contents")
    real = getattr(os, failing)

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="No space"):
        write_atomically(target, b"new contents that never land")
    monkeypatch.setattr(os, failing, real)
    assert target.read_bytes() == b"old contents" and leftovers(tmp_path) == []


def test_an_interrupted_write_leaves_no_temporary_behind(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    write_atomically(target, b"old")

    def interrupted(descriptor, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_a_temporary_left_by_a_crash_is_never_reused(tmp_path, monkeypatch):
    """A stale temporary of the name the writer picks first (a crash, a reused process id) is skipped."""
    target = tmp_path / "state.json"
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda size: next(names))
    stale = tmp_path / f".state.json.aaaaaaaaaaaa{files.TEMPORARY_SUFFIX}"
    stale.write_bytes(b"half a file from before the crash")
    write_atomically(target, b"fresh")
    assert target.read_bytes() == b"fresh" and stale.read_bytes() == b"half a file from before the crash"


def test_missing_directories_are_created_and_each_fsynced_into_its_parent(tmp_path, monkeypatch):
    log = CallLog(monkeypatch)
    make_directories(tmp_path / "a" / "b")
    monkeypatch.undo()
    synced = [call[1] for call in log.calls if call[0] == "fsync"]
    assert synced == [str(tmp_path), str(tmp_path / "a")]
    assert (tmp_path / "a" / "b").is_dir()


def test_a_private_file_lives_in_a_0700_directory(tmp_path):
    target = tmp_path / "home" / "keyring.json"
    write_private_file(target, b"{}")
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


# -- every durable write of the project goes through the helper -------------------------------------------------
PACKAGES = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet")
WRITERS = {"write_text", "write_bytes", "rename", "mkstemp", "NamedTemporaryFile"}
NOT_DURABLE_STATE = {("localnet/supervisor.py", "write_text"), ("abci_app/engine/producer.py", "write_text"),
                     ("abci_app/server.py", "replace"), ("abci_app/store_import.py", "rename")}
"""A service's pid file (rewritten at every start, never renamed into place), the engine's test-hook pause
marker, the ABCI unix socket (bound under a staging name, made 0600, renamed into place), and a state-synced
LevelDB directory swapped for the node's empty one (LevelDB syncs its own files; a crash mid-swap leaves no
state, and the node syncs again): no file's bytes, nothing to recover after a crash."""


def direct_writes(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            owner = node.func.value
            if name in WRITERS or (name == "replace" and isinstance(owner, ast.Name) and owner.id == "os"):
                found.add(name)
            elif (name == "replace" and len(node.args) == 1 and not node.keywords
                  and not isinstance(node.args[0], ast.Constant)):
                found.add("Path.replace")  # str.replace takes two arguments, dataclasses.replace keywords
    return found


def test_no_module_writes_a_file_in_place_or_renames_one_outside_the_atomic_writer():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == "wallet/files.py" or "/proto/" in relative:
                continue
            for name in direct_writes(path):
                if (relative, name) not in NOT_DURABLE_STATE:
                    offenders.append(f"{relative}: {name}")
    assert offenders == []
