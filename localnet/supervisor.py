"""Child processes of a localnet: start, watch, stop, with nothing left behind.

Every service is a real process started in its own session (so it and anything it spawns can be signalled as
one session), its output appended to `<home>/logs/<name>.log`, its pid recorded in `<home>/run/<name>.pid`.
`stop_all` sends SIGTERM to every process of each session, waits, then SIGKILLs what is left; it also
works from another process (`trolly-localnet down`) through the pid files, checking that a recorded pid still
belongs to the process we started (its start time is recorded too) before signalling it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from trolly.abci_app.listen_address import AddressError, parse_address

from .home_layout import LocalnetError

log = logging.getLogger("trolly.localnet")


class ServiceError(LocalnetError):
    """A service could not be started, or did not become ready."""


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    ready_address: str = ""
    """Where the service listens once ready, `unix://PATH` or `tcp://HOST:PORT` (empty: nothing to wait for);
    `wait_ready` waits until it accepts a connection, so that a service that connects to it once at start-up
    (CometBFT to its app) is not started too early."""


def _socket_target(address: str) -> tuple[socket.AddressFamily, str | tuple[str, int]]:
    """The socket family and connect target of `unix://PATH` or `tcp://HOST:PORT` (the app server's rule)."""
    try:
        listen = parse_address(address)
    except AddressError:
        raise ServiceError(f"internal: cannot wait for {address!r}: expected unix://PATH or tcp://HOST:PORT") from None
    return (socket.AF_UNIX, listen.path) if listen.scheme == "unix" else (socket.AF_INET, (listen.host, listen.port))


def _process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/<pid>/stat), to recognise pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, start_time: str | None) -> bool:
    current = _process_start_time(pid)
    if current is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and (start_time is None or current == start_time)


class Supervisor:
    """Starts and stops the services of one localnet home."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.run_dir = self.home / "run"
        self.log_dir = self.home / "logs"
        self.procs: dict[str, subprocess.Popen] = {}

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, spec: ServiceSpec) -> subprocess.Popen:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.is_running(spec.name):
            raise ServiceError(f"service {spec.name} is already running (pid file {self.pid_file(spec.name)})")
        env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
        with open(self.log_file(spec.name), "ab") as out:
            proc = subprocess.Popen(
                list(spec.argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, cwd=self.home,
            )
        record = {
            "pid": proc.pid, "start_time": _process_start_time(proc.pid), "argv": list(spec.argv),
            "started_order": time.time_ns(),
        }
        self.pid_file(spec.name).write_text(json.dumps(record))
        self.procs[spec.name] = proc
        log.info("started %s (pid %d): %s", spec.name, proc.pid, " ".join(spec.argv))
        return proc

    def wait_ready(self, spec: ServiceSpec, timeout: float) -> None:
        """Return once `spec.ready_address` accepts connections; fail if the service exits or time runs out.

        A unix socket file left by a killed run of the service refuses connections until the new run replaces
        it, so it is not taken for the service being ready."""
        if not spec.ready_address:
            return
        family, target = _socket_target(spec.ready_address)
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                try:
                    probe.connect(target)
                    return
                except OSError:
                    pass
            proc = self.procs.get(spec.name)
            if proc is not None and proc.poll() is not None:
                raise ServiceError(f"{spec.name} exited with code {proc.returncode} during start-up, before it "
                                   f"listened on {spec.ready_address}; see {self.log_file(spec.name)}")
            if time.monotonic() > deadline:
                raise ServiceError(f"{spec.name} did not listen on {spec.ready_address} within {timeout:.0f}s; "
                                   f"see {self.log_file(spec.name)}")
            time.sleep(0.1)

    def records(self) -> dict[str, dict]:
        out = {}
        if self.run_dir.is_dir():
            for path in sorted(self.run_dir.glob("*.pid")):
                try:
                    out[path.stem] = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
        return out

    def is_running(self, name: str) -> bool:
        record = self.records().get(name)
        return bool(record) and _alive(record["pid"], record.get("start_time"))

    def exited(self) -> dict[str, int]:
        """Services started by this supervisor that have exited, with their exit codes."""
        return {name: proc.returncode for name, proc in self.procs.items() if proc.poll() is not None}

    def stop(self, name: str, timeout: float = 10.0) -> None:
        self._stop_records({name: self.records().get(name)}, timeout)

    def kill(self, name: str, timeout: float = 10.0) -> bool:
        """SIGKILL a service's whole session at once, as a crash would (no chance to clean up), and wait until
        every process of it is gone; its pid file goes. False if it was not running."""
        record = self.records().get(name)
        if not record or not _session_alive(record):
            self.pid_file(name).unlink(missing_ok=True)
            return False
        _signal_session(record, signal.SIGKILL)
        self._wait_sessions({name: record}, timeout)
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.wait(timeout=5)
        self.pid_file(name).unlink(missing_ok=True)
        log.info("killed %s (pid %d) with SIGKILL", name, record["pid"])
        return True

    def stop_all(self, timeout: float = 10.0) -> None:
        # Stop in reverse start order: clients (workers, verifiers) before the node they talk to.
        records = self.records()
        ordered = sorted(records.items(), key=lambda item: item[1].get("started_order", 0), reverse=True)
        self._stop_records(dict(ordered), timeout)

    def _stop_records(self, records: dict[str, dict | None], timeout: float) -> None:
        """SIGTERM each service's whole session, wait for all of it to end, SIGKILL what is left after `timeout`.

        The session, not just the recorded process: a service's children (a verifier's replay processes)
        must not outlive it, and a service that was SIGKILLed may have left children behind.
        """
        live = {name: record for name, record in records.items() if record and _session_alive(record)}
        for record in live.values():
            _signal_session(record, signal.SIGTERM)
        self._wait_sessions(live, timeout)
        for name, record in live.items():
            log.warning("%s (pid %d) did not stop within %.1fs of SIGTERM; killing it", name, record["pid"], timeout)
            _signal_session(record, signal.SIGKILL)
        self._wait_sessions(live, 5.0)  # SIGKILL is delivered asynchronously
        for name in records:
            proc = self.procs.pop(name, None)
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self.pid_file(name).unlink(missing_ok=True)

    def _wait_sessions(self, live: dict[str, dict], timeout: float) -> None:
        """Wait until every session in `live` has ended, removing those that did from `live`."""
        deadline = time.monotonic() + timeout
        while live:
            for name, record in list(live.items()):
                proc = self.procs.get(name)
                if proc is not None:
                    proc.poll()  # reap our own child, or it stays a zombie
                if not _session_alive(record):
                    del live[name]
            if not live or time.monotonic() > deadline:
                return
            time.sleep(0.05)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state [0], ppid [1], process group [2], session [3], start [19]."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _session_members(record: dict) -> list[int]:
    """Live processes of the session the service leads (its session id is its pid: started with setsid).

    If the recorded pid now belongs to another process (reused after the service ended), that process leads a
    session of its own that is none of ours: nothing is returned.
    """
    leader = record["pid"]
    fields = _stat_fields(leader)
    if fields is not None and record.get("start_time") not in (None, fields[19]):
        return []
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[0] != "Z" and int(fields[3]) == leader:
                members.append(int(entry))
    return members


def _session_alive(record: dict) -> bool:
    return _alive(record["pid"], record.get("start_time")) or bool(_session_members(record))


def _signal_session(record: dict, sig: int) -> None:
    for pid in _session_members(record):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
