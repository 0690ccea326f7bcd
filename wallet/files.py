"""Private files in the wallet home: directories 0700, files 0600, written atomically.

A file is written to a fresh temporary name (created with mode 0600, so it is never readable by others even
for an instant), flushed to disk, then renamed over the target: a crash or a failed command leaves either the
old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import pathlib

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def ensure_private_directory(path: pathlib.Path) -> pathlib.Path:
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    # mkdir's mode is filtered by the umask, and an existing directory keeps its mode: set it explicitly.
    os.chmod(path, DIRECTORY_MODE)
    return path


def write_private_file(path: pathlib.Path, data: bytes, *, exclusive: bool = False) -> None:
    """Atomically write `data` to `path` with mode 0600; with `exclusive`, refuse to replace an existing file."""
    ensure_private_directory(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            # link() fails if the target exists, unlike rename(): no window where another writer is overwritten.
            os.link(temporary, path)
            os.unlink(temporary)
        else:
            os.replace(temporary, path)
    except BaseException:
        if temporary.exists():
            temporary.unlink()
        raise
