"""Shared by the localnet tests: a free block of ports per localnet, the processes a localnet leaves, and
the `trolly-localnet` command run as a user runs it.

Ports: a localnet uses `LocalnetConfig.ports()` (offsets from its base port, all within base .. base + 135).
Tests pick base ports from 20000..32000, below the kernel's ephemeral range (32768+), where other tests' port-0
listeners cannot land, in blocks of 200, starting at a block chosen by the pytest-xdist worker so that two
workers do not race for the same block; every port of the block is checked by binding it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from trolly.abci_app.cometbft import CometbftError, find_cometbft
from trolly.localnet.home_layout import LocalnetConfig
from trolly.wallet.rpc import RpcClient
from whole_task import whole_task

PORT_RANGE = range(20_000, 32_000, 200)
LOCALNET = str(Path(sys.executable).parent / "trolly-localnet")
WALLET = str(Path(sys.executable).parent / "trolly-wallet")


def cometbft_missing() -> str:
    """Why no usable CometBFT v0.38 binary was found ('' when one was): the skip reason of real-CometBFT tests."""
    try:
        find_cometbft()
    except CometbftError as exc:
        return str(exc)
    return ""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_handed_out: set[int] = set()


def free_base_port(validators: int = 1, workers: int = 3) -> int:
    """A base port whose every localnet port is free now (and not handed out before in this process)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    offset = (int(worker[2:]) if worker[2:].isdigit() else 0) * 13 + os.getpid() % 7
    blocks = list(PORT_RANGE)
    for i in range(len(blocks)):
        base = blocks[(offset + i) % len(blocks)]
        if base in _handed_out:
            continue
        ports = LocalnetConfig(engine="cometbft", validators=validators, workers=workers, base_port=base).ports()
        if all(_bindable(port) for port in ports):
            _handed_out.add(base)
            return base
    raise RuntimeError("no free block of localnet ports in 20000..32000")


def localnet(*args: str, timeout: float = 120.0, check: bool = True, env: dict | None = None):
    """Run `trolly-localnet ARGS...`; with `check`, fail the test with its output if it exits non-zero."""
    done = subprocess.run([LOCALNET, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise AssertionError(f"trolly-localnet {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


# ------------------------------------------------------------------------------------------- processes


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1], session [3], start [19])."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def live_processes() -> dict[int, list[str]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[0] != "Z":
                out[int(entry)] = fields
    return out


def process_family(pids: set[int]) -> dict[int, str]:
    """The given processes, everything in their sessions, and all their descendants: pid -> start time."""
    processes = live_processes()
    family = {pid for pid in pids if pid in processes}
    sessions = set(pids)  # every service is started in its own session: session id == its pid
    family |= {pid for pid, fields in processes.items() if int(fields[3]) in sessions}
    grew = True
    while grew:
        children = {pid for pid, fields in processes.items() if int(fields[1]) in family} - family
        family |= children
        grew = bool(children)
    return {pid: processes[pid][19] for pid in family}


def survivors(family: dict[int, str]) -> list[str]:
    """Members of `family` still alive (same pid and start time), with their command lines."""
    left = []
    for pid, start in family.items():
        fields = _stat(pid)
        if fields is not None and fields[0] != "Z" and fields[19] == start:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                command = "?"
            left.append(f"{pid}: {command}")
    return left


def recorded_pids(home: Path) -> dict[str, int]:
    """Service name -> pid from the localnet's pid files."""
    return {path.stem: json.loads(path.read_text())["pid"] for path in sorted((home / "run").glob("*.pid"))}


def processes_mentioning(text: str) -> list[str]:
    """Live processes whose command line contains `text` (every localnet service names its home)."""
    found = []
    for pid in live_processes():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command and pid != os.getpid():
            found.append(f"{pid}: {command}")
    return found


# ------------------------------------------------------------------------------------------------ chain


def query(rpc_url: str, path: str) -> dict:
    with RpcClient(rpc_url, timeout=5.0) as client:
        return client.query_json(path)


def wait_until(condition, timeout: float, what: str, interval: float = 0.5):
    """Poll `condition()` (errors count as not yet) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the node may be down or restarting: keep polling
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})")


def task_ended(rpc_url: str, task_id: int = 1, timeout: float = 900.0) -> dict:
    """The whole view of task `task_id` (`whole_task.py`) once it is no longer open or running."""

    def ended() -> dict | None:
        view = whole_task(lambda path: query(rpc_url, path), task_id)
        return view if view["status"] not in ("open", "running") else None

    return wait_until(ended, timeout=timeout, what=f"task {task_id} to end")


# ------------------------------------------------------------------------------------------------ a user's shell


def exported_env(up: subprocess.CompletedProcess) -> dict[str, str]:
    """This process's environment plus the variables `trolly-localnet up -d` tells its user to export."""
    exported = [line for line in (up.stdout + up.stderr).splitlines() if line.startswith("export ")]
    assert exported, up.stdout + up.stderr
    return {**os.environ, **dict(pair.split("=", 1) for pair in exported[0].split()[1:])}


def wallet_in(env: dict[str, str], cwd: Path, timeout: float = 180.0):
    """`trolly-wallet ARGS` as that user runs it (with `env`, in `cwd`); each run must succeed."""

    def wallet(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([WALLET, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
        assert done.returncode == 0, f"trolly-wallet {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    return wallet


def listening_sockets(pids) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state held by the given processes (IPv4 and IPv6)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            if len(address) == 8:  # IPv4, little-endian bytes
                text = socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1])
            else:  # IPv6: four little-endian 32-bit words
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, 32, 8))
                text = socket.inet_ntop(socket.AF_INET6, raw)
            found.add((text, int(port, 16)))
    return found


def four_validators(tmp_path_factory, name: str):
    """A module's 4-validator CometBFT localnet with no workers and 300 ms blocks (a generator for a fixture to
    `yield from`): up on free ports, taken down after the module."""
    from trolly.localnet.network import Localnet

    home = tmp_path_factory.mktemp(name) / "net"
    base = free_base_port(validators=5, workers=0)
    localnet("up", "-d", "--validators", "4", "--workers", "0", "--home", str(home), "--base-port", str(base),
             "--block-time", "300ms")
    network = Localnet(home)
    yield network
    network.down()
