"""A local worker (`trolly-worker start`) run by the console as a supervised child process, for the Provide
compute page: set up once (`trolly-worker init`, into `<home>/console/worker`), started, watched, stopped; and
the page's preflight, `trolly-worker preflight` in a child too. The worker's console script pins the
instruction set before torch loads (`compute.instruction_sets.run_pinned`), and the console itself loads no torch
for this page: it reads what the children leave in the worker's home.

The keyring password reaches the worker as `TROLLY_WALLET_PASSWORD` in the child's environment only (the
worker signs for as long as it runs, as it does when started from a shell with that variable set); the console
checks it by unlocking the key first, so a wrong password starts nothing, and keeps it nowhere itself. A
service with a lifecycle: `stop` ends the worker (SIGTERM, then SIGKILL), and the console stops it on exit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from trolly.compute.worker.config import CONFIG_FILE
from trolly.compute.worker.preflight_record import PREFLIGHT_FILE, Preflight, save_preflight
from trolly.wallet.passwords import PASSWORD_ENVIRONMENT_VARIABLE

from .config import ConsoleConfig

STOP_SECONDS = 15.0
"""How long a worker has to stop after SIGTERM (it finishes its current step) before it is killed."""
LOG_TAIL = 30


class WorkerRefused(Exception):
    """The worker cannot be set up or started as asked; says why."""


@dataclasses.dataclass
class WorkerRun:
    process: subprocess.Popen
    started: float
    log: pathlib.Path


def worker_script() -> str:
    return str(pathlib.Path(sys.executable).parent / "trolly-worker")


class LocalWorker:
    """The console's one local worker: its home, its process and its log."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.home = config.work / "worker"
        self.run: WorkerRun | None = None

    @property
    def key_name(self) -> str | None:
        """The key the worker was set up with, None before `init`."""
        try:
            return json.loads((self.home / CONFIG_FILE).read_text())["key_name"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def status(self) -> dict:
        running = self.run is not None and self.run.process.poll() is None
        exit_code = None if self.run is None or running else self.run.process.returncode
        log = self.run.log if self.run else self.home / "console-worker.log"
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:] if log.exists() else []
        return {"home": str(self.home), "key": self.key_name, "running": running,
                "pid": self.run.process.pid if running else None, "exit_code": exit_code,
                "started_at": self.run.started if self.run else None, "log_tail": tail}

    async def start(self, key_name: str, password: str) -> dict:
        """Set the worker up for `key_name` if it is not yet (refused if it was, for another key), then start
        it; the caller has checked the password."""
        if self.run is not None and self.run.process.poll() is None:
            raise WorkerRefused("the worker is already running: stop it first")
        if self.key_name is not None and self.key_name != key_name:
            raise WorkerRefused(f"this console's worker is set up for the key {self.key_name!r}: "
                                f"start it with that key")
        environment = {**os.environ, PASSWORD_ENVIRONMENT_VARIABLE: password}
        private = ["--allow-private-blob-hosts"] if self.config.allow_private_addresses else []
        if self.key_name is None:
            init = await asyncio.create_subprocess_exec(
                worker_script(), "init", "--home", str(self.home), "--key", key_name, "--keyring-backend",
                self.config.keyring_backend, "--wallet-home", str(self.config.home), "--node", self.config.node_url,
                *private, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT)
            output, _ = await init.communicate()
            if init.returncode != 0:
                raise WorkerRefused(f"trolly-worker init failed: {output.decode(errors='replace').strip()[-2000:]}")
        log = self.home / "console-worker.log"
        with open(log, "ab") as out:
            process = subprocess.Popen([worker_script(), "start", "--home", str(self.home), "--no-progress", *private],
                                       env=environment, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.run = WorkerRun(process, time.time(), log)
        return self.status()

    def saved_preflight(self) -> Preflight | None:
        """The preflight last saved in the worker's home (by `init` or by `preflight`), None before one."""
        saved = self.home / PREFLIGHT_FILE
        return Preflight.from_json(json.loads(saved.read_text())) if saved.exists() else None

    async def preflight(self) -> Preflight:
        """Measure this machine with `trolly-worker preflight` (the chain's market params from the console's node
        bound the largest models) and save it in the worker's home, as `init` does."""
        self.home.mkdir(parents=True, exist_ok=True)
        measuring = await asyncio.create_subprocess_exec(
            worker_script(), "preflight", "--home", str(self.home), "--node", self.config.node_url, "-o", "json",
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        output, said = await measuring.communicate()
        if measuring.returncode != 0:
            raise WorkerRefused(f"trolly-worker preflight failed: {said.decode(errors='replace').strip()[-2000:]}")
        measured = Preflight.from_json(json.loads(output))
        await asyncio.to_thread(save_preflight, self.home, measured)
        return measured

    async def stop(self) -> dict:
        """SIGTERM to the worker's process group, then SIGKILL after STOP_SECONDS; its state stays on disk."""
        if self.run is not None and self.run.process.poll() is None:
            process = self.run.process
            os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                await asyncio.to_thread(process.wait)
        return self.status()
