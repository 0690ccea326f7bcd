"""Verifier and worker processes of a localnet.

Validator i's operator key (`validator-i`) signs verifier i's verdicts. Worker i uses key `worker-i` and
serves its blobs on `config.blob_port(i)`; the last `slow_workers` of them declare themselves slower (fewer
inner steps per round), which shows the samples-weighted blending of heterogeneous hardware. With `cheat`
set, the first worker trains dishonestly with that strategy (a test switch) so the network can be seen
catching and slashing it.
"""

from __future__ import annotations

import subprocess

from .layout import Layout, LocalnetConfig, LocalnetError
from .services import console_script
from .supervisor import ServiceSpec

SLOWDOWN = 2.0
"""How much slower a slow worker declares itself (it runs half the inner steps of the others)."""


def is_slow(config: LocalnetConfig, index: int) -> bool:
    return index >= config.workers - config.slow_workers


def init_workers(layout: Layout, config: LocalnetConfig) -> None:
    """`trolly-worker init` for each worker that has no home yet."""
    worker = console_script("trolly-worker")
    for i in range(config.workers):
        home = layout.worker_home(i)
        if (home / "worker.json").exists():
            continue
        argv = [worker, "init", "--home", str(home), "--key", f"worker-{i}", "--keyring-backend", "test",
                "--wallet-home", str(layout.wallet_home), "--node", config.rpc_url(0),
                "--blob-port", str(config.blob_port(i))]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise LocalnetError(f"trolly-worker init for worker-{i} failed: {done.stderr.strip() or done.stdout.strip()}")


def client_services(layout: Layout, config: LocalnetConfig) -> list[ServiceSpec]:
    verifier = console_script("trolly-verifier")
    worker = console_script("trolly-worker")
    specs = []
    for i in range(config.validators):
        specs.append(ServiceSpec(f"verifier-{i}", (
            verifier, "start", "--home", str(layout.verifier_home(i)), "--node", config.rpc_url(i),
            "--key", f"validator-{i}", "--wallet-home", str(layout.wallet_home), "--keyring-backend", "test",
            "--poll-interval", "0.5", "--retry-delay", "1", "--unavailable-attempts", "3",
        )))
    init_workers(layout, config)
    for i in range(config.workers):
        argv = [worker, "start", "--home", str(layout.worker_home(i)), "--no-progress", "--poll-interval", "0.3"]
        if is_slow(config, i):
            argv += ["--declare-slowdown", str(SLOWDOWN)]
        if config.cheat and i == 0:
            argv += ["--cheat", config.cheat]
        specs.append(ServiceSpec(f"worker-{i}", tuple(argv)))
    return specs
