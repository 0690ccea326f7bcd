"""Child processes of a localnet: start, watch, stop, with nothing left behind.

Every service is a real process started in its own session (so it and anything it spawns can be signalled as
one process group), its output appended to `<home>/logs/<name>.log`, its pid recorded in
`<home>/run/<name>.pid`. `stop_all` sends SIGTERM to each group, waits, then SIGKILLs what is left; it also
works from another process (`trolly-localnet down`) through the pid files, checking that a recorded pid still
belongs to the process we started (its start time is recorded too) before signalling it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("trolly.localnet")


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


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
            raise RuntimeError(f"service {spec.name} is already running (pid file {self.pid_file(spec.name)})")
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

    def stop_all(self, timeout: float = 10.0) -> None:
        # Stop in reverse start order: clients (workers, verifiers) before the node they talk to.
        records = self.records()
        ordered = sorted(records.items(), key=lambda item: item[1].get("started_order", 0), reverse=True)
        self._stop_records(dict(ordered), timeout)

    def _stop_records(self, records: dict[str, dict | None], timeout: float) -> None:
        live = {}
        for name, record in records.items():
            if record and _alive(record["pid"], record.get("start_time")):
                live[name] = record["pid"]
                _signal_group(record["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while live and time.monotonic() < deadline:
            for name, pid in list(live.items()):
                proc = self.procs.get(name)
                if proc is not None:
                    proc.poll()
                if not _alive(pid, records[name].get("start_time")):
                    del live[name]
            time.sleep(0.05)
        for name, pid in live.items():
            log.warning("%s (pid %d) ignored SIGTERM for %.0fs; killing it", name, pid, timeout)
            _signal_group(pid, signal.SIGKILL)
        for name in records:
            proc = self.procs.pop(name, None)
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self.pid_file(name).unlink(missing_ok=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)
