"""A record of the os calls a file writer makes (`CallLog`), for the tests that check their order."""

from __future__ import annotations

import os


class CallLog:
    """Records the os calls of interest (wrapping the real ones, which still run)."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple] = []
        self.paths: dict[int, str] = {}  # descriptor -> what it was opened on
        real_open, real_write, real_fsync = os.open, os.write, os.fsync
        real_replace, real_link, real_fchmod = os.replace, os.link, os.fchmod

        def record_open(path, flags, mode=0o777, **kwargs):
            descriptor = real_open(path, flags, mode, **kwargs)
            self.paths[descriptor] = os.fspath(path)
            self.calls.append(("open", os.fspath(path), flags, mode))
            return descriptor

        def record_write(descriptor, data):
            self.calls.append(("write", self.paths.get(descriptor)))
            return real_write(descriptor, data)

        def record_fsync(descriptor):
            self.calls.append(("fsync", self.paths.get(descriptor)))
            return real_fsync(descriptor)

        def record_replace(source, target):
            self.calls.append(("replace", os.fspath(source), os.fspath(target)))
            return real_replace(source, target)

        def record_link(source, target):
            self.calls.append(("link", os.fspath(source), os.fspath(target)))
            return real_link(source, target)

        def record_fchmod(descriptor, mode):
            self.calls.append(("fchmod", self.paths.get(descriptor), mode))
            return real_fchmod(descriptor, mode)

        for name, function in (("open", record_open), ("write", record_write), ("fsync", record_fsync),
                               ("replace", record_replace), ("link", record_link), ("fchmod", record_fchmod)):
            monkeypatch.setattr(os, name, function)

    def kinds(self) -> list[str]:
        return [call[0] for call in self.calls]
