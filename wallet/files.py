"""Files that survive a crash or a power loss: the one atomic writer of the project.

Every durable file the project writes (node homes, keyring, worker state and configuration, verifier
evidence and weights cache, blobs, localnet configuration) goes through this module:

1. a temporary file is created in the target's own directory, exclusively (`O_CREAT | O_EXCL`, so no other
   file or link is ever followed or reused) with mode 0600 (never readable by others, even for an instant);
2. the bytes are written, and the file is `fsync`ed: its contents are on the disk before it has a name;
3. it is renamed over the target (or, with `exclusive`, hard-linked to a target that must not exist yet);
4. the directory is `fsync`ed, so that the new name itself survives a power loss.

A crash at any point leaves either the old file or the new one, never half of one; a failure before the
rename removes the temporary file and leaves the old file untouched. Directories this module creates are
`fsync`ed into their parents too.

This module imports nothing from the project, and nothing but the standard library, so that every package
may use it: `abci_app` imports this one leaf module of `wallet` (the single exception to the import direction,
tested in tests/project/test_import_direction.py), `compute` and `verifier` import it as they import the wallet.
"""

from __future__ import annotations

import os
import shutil
import pathlib
import secrets

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
TEMPORARY_SUFFIX = ".tmp"


def ensure_private_directory(path: pathlib.Path) -> pathlib.Path:
    """`path` as a directory with mode 0700, created (durably) with its parents when missing."""
    make_directories(path, DIRECTORY_MODE)
    # mkdir's mode is filtered by the umask, and an existing directory keeps its mode: set it explicitly.
    os.chmod(path, DIRECTORY_MODE)
    return path


def make_directories(path: pathlib.Path, mode: int = 0o777) -> None:
    """Create `path` and its missing parents, each `fsync`ed into its parent so that it survives a power loss.
    An existing directory is left as it is."""
    path = pathlib.Path(path)
    missing = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # made meanwhile by another thread or process, which syncs it itself
        fsync_directory(directory.parent)


def fsync_directory(directory: pathlib.Path) -> None:
    """Flush a directory's entries (names created, renamed or removed in it) to the disk."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def create_temporary(directory: pathlib.Path, name: str) -> tuple[int, pathlib.Path]:
    """A new, empty file `.<name>.<random>.tmp` in `directory`, created exclusively with mode 0600, opened for
    writing; returns its descriptor and path. The random part keeps concurrent writers (and temporaries a
    crash left behind under a reused process id) apart."""
    while True:
        temporary = pathlib.Path(directory) / f".{name}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE), temporary
        except FileExistsError:
            continue


def write_all(descriptor: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of `data` (os.write may write fewer than asked)."""
    view = memoryview(data).cast("B")
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


def install(temporary: pathlib.Path, path: pathlib.Path, *, exclusive: bool = False) -> None:
    """Give the complete, `fsync`ed file `temporary` the name `path` and `fsync` the directory; with
    `exclusive`, fail with FileExistsError if `path` exists. `temporary` is removed whatever happens."""
    try:
        if exclusive:
            # link() fails if the target exists, unlike rename(): no window where another writer is overwritten.
            os.link(temporary, path)
            os.unlink(temporary)
        else:
            os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise
    fsync_directory(path.parent)


def install_directory(temporary: pathlib.Path, directory: pathlib.Path) -> None:
    """Give the complete directory `temporary` (its files written with `write_atomically`, so each is already
    `fsync`ed) the name `directory`, which must not exist or be empty, and `fsync` the parent: a reader sees the
    whole directory or none of it. `temporary` is removed whatever happens."""
    try:
        if directory.exists():
            directory.rmdir()  # an empty target only: OSError otherwise
        os.rename(temporary, directory)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    fsync_directory(directory.parent)


def write_atomically(path: pathlib.Path, data: bytes | bytearray | memoryview, *, mode: int = FILE_MODE,
                     exclusive: bool = False) -> None:
    """Write `data` to `path` so that a crash or power loss leaves the old file or the new one (see the module
    docstring). The file ends with `mode` (0600 unless asked otherwise: the temporary is 0600 until it is
    complete); with `exclusive`, refuse to replace an existing file (FileExistsError). Missing parent
    directories are created."""
    path = pathlib.Path(path)
    make_directories(path.parent)
    descriptor, temporary = create_temporary(path.parent, path.name)
    try:
        try:
            write_all(descriptor, data)
            if mode != FILE_MODE:
                os.fchmod(descriptor, mode)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    except BaseException:
        _remove(temporary)
        raise
    install(temporary, path, exclusive=exclusive)


def write_private_file(path: pathlib.Path, data: bytes, *, exclusive: bool = False) -> None:
    """`write_atomically` with mode 0600 into a directory made private (0700); with `exclusive`, refuse to
    replace an existing file."""
    ensure_private_directory(path.parent)
    write_atomically(path, data, exclusive=exclusive)


def _remove(temporary: pathlib.Path) -> None:
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
