"""Verifier, worker and console processes of a localnet.

Validator i's operator key (`validator-i`) signs verifier i's verdicts; verifier i also serves a blob relay on
`config.relay_port(i)` (a worker started with `--relay` pushes its blobs there) and its metrics on
`config.verifier_metrics_port(i)`. Worker i uses key `worker-i`, serves its blobs on `config.blob_port(i)` and its
metrics on `config.worker_metrics_port(i)`; the last `slow_workers` of them declare themselves slower (fewer
inner steps per round), which shows the samples-weighted blending of heterogeneous hardware. With `cheat`
set, the first worker trains dishonestly with that strategy (a test switch) so the network can be seen
catching and slashing it. The web console signs with the localnet's test keyring (its `requester` key).
"""

from __future__ import annotations

import subprocess

from trolly.wallet.command_line.options import CONSOLE_TOKEN_ENVIRONMENT_VARIABLE

from .home_layout import Layout, LocalnetConfig, LocalnetError
from .services import console_script
from .supervisor import ServiceSpec

SLOWDOWN = 2.0
"""How much slower a slow worker declares itself (it runs half the inner steps of the others)."""


def is_slow(config: LocalnetConfig, index: int) -> bool:
    return index >= config.workers - config.slow_workers


def begin_worker_init(layout: Layout, config: LocalnetConfig) -> dict[int, subprocess.Popen]:
    """Start `trolly-worker init` for each worker that has no home yet, all at once, and return at once.

    Each init is a process that imports torch: seconds on a loaded machine. They only write the worker's home
    (no node needed), so they run while the node starts; `finish_worker_init` waits for them.
    """
    worker = console_script("trolly-worker")
    running: dict[int, subprocess.Popen] = {}
    for i in range(config.workers):
        if (layout.worker_home(i) / "worker.json").exists():
            continue
        argv = [worker, "init", "--home", str(layout.worker_home(i)), "--key", f"worker-{i}",
                "--keyring-backend", "test", "--wallet-home", str(layout.wallet_home), "--node", config.rpc_url(0),
                "--blob-port", str(config.blob_port(i)), "--allow-private-blob-hosts"]
        running[i] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      stdin=subprocess.DEVNULL)
    return running


def finish_worker_init(running: dict[int, subprocess.Popen], timeout: float = 300.0) -> None:
    failures = []
    for i, process in running.items():
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        if process.returncode != 0:
            failures.append(f"trolly-worker init for worker-{i} failed: {output.strip()}")
    if failures:
        raise LocalnetError("; ".join(failures))


def abandon_worker_init(running: dict[int, subprocess.Popen]) -> None:
    """Stop inits still running (start-up failed elsewhere)."""
    for process in running.values():
        if process.poll() is None:
            process.kill()
        process.communicate()


def verifier_services(layout: Layout, config: LocalnetConfig) -> list[ServiceSpec]:
    verifier = console_script("trolly-verifier")
    return [
        ServiceSpec(f"verifier-{i}", (
            verifier, "start", "--home", str(layout.verifier_home(i)), "--node", config.rpc_url(i),
            "--key", f"validator-{i}", "--wallet-home", str(layout.wallet_home), "--keyring-backend", "test",
            "--poll-interval", "0.5", "--retry-delay", "1", "--unavailable-attempts", "3",
            "--allow-private-blob-hosts",  # the workers' blob services listen on 127.0.0.1
            "--relay-port", str(config.relay_port(i)),  # a blob relay beside it, for workers nothing reaches
            "--metrics-laddr", f"127.0.0.1:{config.verifier_metrics_port(i)}",
        ))
        for i in range(config.validators)
    ]


def worker_services(layout: Layout, config: LocalnetConfig) -> list[ServiceSpec]:
    """The workers' start commands (their homes must exist: `begin_worker_init` first)."""
    worker = console_script("trolly-worker")
    specs = []
    for i in range(config.workers):
        argv = [worker, "start", "--home", str(layout.worker_home(i)), "--no-progress", "--poll-interval", "0.3",
                "--allow-private-blob-hosts",  # peers' blob services listen on 127.0.0.1 (also for older homes)
                "--metrics-laddr", f"127.0.0.1:{config.worker_metrics_port(i)}"]
        if is_slow(config, i):
            argv += ["--declare-slowdown", str(SLOWDOWN)]
        if config.cheat and i == 0:
            argv += ["--cheat", config.cheat]
        if i >= config.workers - config.wasm32_workers:
            argv += ["--kernel", "wasm32"]
        specs.append(ServiceSpec(f"worker-{i}", tuple(argv)))
    return specs


def console_service(layout: Layout, config: LocalnetConfig) -> ServiceSpec:
    """`trolly-console` on `config.console_port()`, against the first node, with the localnet's wallet home (its
    test keyring) and fetches from the workers on 127.0.0.1 allowed; its access token, the localnet's own
    (`Layout.console_token`), reaches it in its environment, which no other user can read (a command line can
    be)."""
    return ServiceSpec("console", (
        console_script("trolly-console"), "--port", str(config.console_port()), "--node", config.rpc_url(0),
        "--home", str(layout.wallet_home), "--keyring-backend", "test", "--allow-private-addresses",
    ), env={CONSOLE_TOKEN_ENVIRONMENT_VARIABLE: layout.console_token()},
        ready_address=f"tcp://127.0.0.1:{config.console_port()}")
