"""`trolly-worker`: the compute provider's command line, thin over `config`, `progress` and `service`.

    trolly-worker preflight [--home H] [--device D] [--node URL] [--probe URL] [-o json]
    trolly-worker init   --home H --key NAME [--keyring-backend test] [--create-key] [--blob-port P] [--node URL]
                         [--allow-private-blob-hosts] [--device D] [--memory-mb M] [--probe URL]
    trolly-worker start  --home H [--max-tasks N [--linger S]] [--task ID] [--declare-slowdown X]
                         [--step-delay S] [--keep-blobs] [--[no-]checkpoint-process] [--[no-]training-core]
                         [--device D] [--kernel torch|wasm32] [--memory-mb M] [--cheat NAME (TEST SWITCH)]
                         [--metrics-laddr HOST:PORT] [--metrics-port-in-use continue|refuse]
    trolly-worker status --home H [-o json]
    trolly-worker earnings --home H [-o json]
    trolly-worker why TASK_ID --home H [-o json]
    trolly-worker leave TASK_ID --home H [--yes] [--node URL] [--password-file F] [-o json]

The home defaults to `$TROLLY_WORKER_HOME`, else `~/.trolly-worker`. The key lives in a wallet keyring: the
worker home's own (`trolly-wallet keys add NAME --home H`), or another wallet home given by `--wallet-home`;
the file backend's password comes from `--password-file` or `$TROLLY_WALLET_PASSWORD`. Failures print one
`Error: ...` line and exit with a non-zero code; `init` writes nothing when it fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import signal
import socket

import click

from trolly.chain.errors import ChainError
from trolly.chain.market.spec import KERNELS, TORCH_KERNEL
from trolly.wallet.amounts import parse_amount
from trolly.wallet.errors import WalletError
from trolly.wallet.keyring import BACKENDS, Keyring
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.market_queries import get_replay_gpus, get_spec
from trolly.wallet.metrics_endpoint import CONTINUE, PORT_IN_USE_CHOICES
from trolly.wallet.rpc import DEFAULT_NODE, RpcClient, normalize_node_url

from ..cheats import CHEATS
from ..errors import ComputeError
from .config import CONFIG_FILE, WorkerConfig, load_config, resolve_home, save_config
from .config import wallet_home
from .display import configure_logging
from .errors import TaskUnfit
from .leave_command import leave
from .metrics import DEFAULT_METRICS_ADDRESS
from .preflight import check_reachability, measure, unfit_reasons
from .preflight_record import PREFLIGHT_FILE, save_preflight
from .progress import WorkerState
from .report_commands import (chain_params, device_option, earnings, home_option, memory_option, preflight,
                              probe_option, why, worker_address)


class WorkerGroup(click.Group):
    """Expected failures become `Error: <reason>` and a non-zero exit code (the wallet's codes for wallet
    errors, e.g. 3 when the node is unreachable; 1 otherwise)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (ComputeError, WalletError, ChainError) as error:
            click.echo(f"Error: {' '.join(str(error).split())}", err=True)
            ctx.exit(getattr(error, "exit_code", 1))


@click.group(cls=WorkerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trolly", prog_name="trolly-worker")
def main() -> None:
    """Trolly compute provider: stake, join training tasks, train, commit, serve blobs, get paid."""


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def refuse_unfit_task(root: pathlib.Path, config: WorkerConfig, task_id: int) -> None:
    """Raise TaskUnfit naming each requirement of task `task_id` this machine, measured now, does not meet."""
    measured = measure(root, config.device or None, duration=0.2)
    with RpcClient(config.node, timeout=10) as client:
        raw = client.run(get_spec(client.async_client, task_id)).spec_bytes
        replayed = client.run(get_replay_gpus(client.async_client)).replayed() if measured.gpu_profile else None
    reasons = unfit_reasons(measured, raw, config.memory_limit_mb, replayed)
    if reasons:
        raise TaskUnfit(f"task {task_id} does not fit this worker: {'; '.join(reasons)}")


@main.command()
@home_option
@click.option("--key", "key_name", required=True, help="Name of the worker's key in the wallet keyring.")
@click.option("--keyring-backend", type=click.Choice(BACKENDS), default="file", show_default=True,
              help="file: encrypted (password); test: UNENCRYPTED, for localnets only.")
@click.option("--wallet-home", "wallet_home_dir", type=click.Path(file_okay=False), default="",
              help="Wallet home holding the keyring (default: the worker home).")
@click.option("--create-key", is_flag=True, help="Create the key if the keyring does not have it.")
@click.option("--password-file", type=click.Path(dir_okay=False), default=None,
              help="Keyring password file (file backend; else $TROLLY_WALLET_PASSWORD).")
@click.option("--node", default=DEFAULT_NODE, show_default=True, help="CometBFT JSON-RPC address of a node.")
@click.option("--blob-host", default="127.0.0.1", show_default=True, help="Address the blob service listens on.")
@click.option("--blob-port", type=click.IntRange(0, 65535), default=0,
              help="Port of the blob service (default: a free port, chosen now and kept).")
@click.option("--public-url", default="", help="URL others reach the blob service at, if not http://HOST:PORT.")
@click.option("--relay", default="", metavar="URL",
              help="No inbound route (NAT, firewall): publish blobs through this blob relay instead of serving them.")
@click.option("--stake", default="0", help="Stake to register with, e.g. 10trl (default: the chain's minimum).")
@click.option("--fee", default="0", help="Fee per transaction, e.g. 5000utrl (default: the chain's minimum for each).")
@click.option("--allow-private-blob-hosts", is_flag=True,
              help="Fetch blobs from loopback and private addresses too (a localnet; never on a public network).")
@device_option
@memory_option
@probe_option
@click.option("--force", is_flag=True, help="Overwrite an existing worker configuration (progress is kept).")
def init(home, key_name, keyring_backend, wallet_home_dir, create_key, password_file, node, relay, blob_host,
         blob_port,
         public_url, stake, fee, allow_private_blob_hosts, device, memory_mb, probe, force) -> None:
    """Write the worker's configuration (its key, node, blob service port and stake) and measure this machine
    (`preflight`): what `start` registers comes from that measurement."""
    root = resolve_home(home)
    if (root / CONFIG_FILE).exists() and not force:
        raise click.ClickException(f"{root / CONFIG_FILE} exists; pass --force to overwrite it")
    config = WorkerConfig(
        key_name=key_name, keyring_backend=keyring_backend, wallet_home=str(wallet_home_dir or ""),
        node=normalize_node_url(node), blob_host=blob_host, blob_port=blob_port or _free_port(blob_host),
        public_url=public_url, relay=relay.rstrip("/"),
        stake=parse_amount(stake, allow_zero=True, what="stake"), fee=parse_amount(fee, allow_zero=True, what="fee"),
        allow_private_blob_hosts=allow_private_blob_hosts, device=device or "", memory_limit_mb=memory_mb or 0,
    )
    preflight = measure(root, config.device or None, chain_params(config.node))  # a device refused: nothing written
    keyring = Keyring(wallet_home(root, config), keyring_backend, PasswordSource(password_file))
    if keyring.exists(key_name):
        info = keyring.get(key_name)
    elif create_key:
        info, mnemonic = keyring.create(key_name)
        click.echo(f"Created key {key_name!r}. Its mnemonic, shown only now:\n  {mnemonic}", err=True)
    else:
        raise click.ClickException(f"no key {key_name!r} in the {keyring_backend} keyring of "
                                   f"{wallet_home(root, config)}; add it with `trolly-wallet keys add` "
                                   f"or pass --create-key")
    if probe:  # asked once the key is there: the probe's blob is the first thing init writes
        preflight = dataclasses.replace(preflight, reachability=asyncio.run(check_reachability(root, config, probe)))
    path = save_config(root, config)
    save_preflight(root, preflight)
    click.echo(f"Initialized worker home {root} ({path.name})")
    click.echo(f"  address {info.address}, blob service {config.blob_url}, node {config.node}")
    if config.relay:
        click.echo(f"  blobs published through the relay {config.relay} (no blob service of its own)")
    click.echo(f"Measured this machine ({PREFLIGHT_FILE}; `start` measures again and registers that):")
    for line in preflight.lines():
        click.echo(f"  {line}")


@main.command()
@home_option
@click.option("--max-tasks", type=click.IntRange(0), default=0, help="Exit after finishing N tasks (0: never).")
@click.option("--task", "task_id", type=click.IntRange(0), default=0, help="Join only this task id.")
@click.option("--linger", type=click.FloatRange(0.0), default=0.0, show_default=True,
              help="With --max-tasks: keep serving blobs (final weights) this many seconds before exiting.")
@click.option("--keep-blobs", is_flag=True, help="Keep finished tasks' checkpoints and updates (default: delete them).")
@click.option("--declare-slowdown", type=click.FloatRange(1.0), default=1.0, show_default=True,
              help="Present this machine as X times slower: declares fewer inner steps and samples/s.")
@click.option("--step-delay", type=click.FloatRange(0.0), default=0.0, show_default=True,
              help="Seconds slept after each inner step, emulating a slower device.")
@click.option("--cheat", type=click.Choice(sorted(CHEATS)), default=None,
              help="TEST SWITCH: play every round with this cheat (`trolly-verifier cheats` lists them), to show "
                   "that verifiers catch it.")
@click.option("--node", default=None, help="Override the node address from worker.json.")
@click.option("--relay", default=None, metavar="URL",
              help="Publish blobs through this blob relay, whatever worker.json says (an empty URL: serve them).")
@click.option("--allow-private-blob-hosts", is_flag=True,
              help="Fetch blobs from loopback and private addresses too, whatever worker.json says (a localnet).")
@click.option("--password-file", type=click.Path(dir_okay=False), default=None,
              help="Keyring password file (file backend; else $TROLLY_WALLET_PASSWORD).")
@click.option("--poll-interval", type=click.FloatRange(0.05), default=0.5, show_default=True,
              help="Seconds between looks at the chain.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--progress/--no-progress", "progress", default=None,
              help="Live progress bar (default: when stderr is a terminal).")
@click.option("--checkpoint-process/--no-checkpoint-process", default=None,
              help="Copy, hash and store checkpoints in a helper process, or in the worker's threads "
                   "(default: worker.json's checkpoint_process, true unless set). Same bytes either way.")
@click.option("--training-core/--no-training-core", default=None,
              help="Give the training thread a CPU to itself during a round, or leave threads to the scheduler "
                   "(default: worker.json's training_core, true unless set). Same bytes either way.")
@device_option
@click.option("--kernel", type=click.Choice(KERNELS), default=TORCH_KERNEL, show_default=True,
              help="Train with PyTorch (its CPU or GPU profile) or with wasm32, the browser worker's kernel under "
                   "wasmtime (an MLP on classification features; joins only tasks whose spec allows it).")
@memory_option
@click.option("--metrics-laddr", default=DEFAULT_METRICS_ADDRESS, show_default=True,
              help="Where to serve this worker's Prometheus metrics, HOST:PORT (0: nowhere).")
@click.option("--metrics-port-in-use", type=click.Choice(PORT_IN_USE_CHOICES), default=CONTINUE, show_default=True,
              help="That address taken: go on without metrics, or refuse to start.")
def start(home, max_tasks, task_id, linger, keep_blobs, declare_slowdown, step_delay, cheat, node, relay,
          allow_private_blob_hosts, password_file, poll_interval, log_level, progress, checkpoint_process,
          training_core, device, kernel, memory_mb, metrics_laddr, metrics_port_in_use) -> None:
    """Run the worker: serve blobs, register, join tasks, train and commit rounds, until stopped."""
    import uvloop

    from .service import ServiceOptions, WorkerService

    root = resolve_home(home)
    config = start_config(load_config(root), node=node, allow_private_blob_hosts=allow_private_blob_hosts,
                          checkpoint_process=checkpoint_process, training_core=training_core, device=device,
                          memory_limit_mb=memory_mb)
    if task_id:  # the one task asked for, refused now if this machine cannot fit it, with the requirement
        refuse_unfit_task(root, config, task_id)
    if relay is not None:
        config = dataclasses.replace(config, relay=relay.rstrip("/"))
    keyring = Keyring(wallet_home(root, config), config.keyring_backend, PasswordSource(password_file))
    key = keyring.signer(config.key_name)
    use_rich = configure_logging(log_level, progress)
    options = ServiceOptions(max_tasks=max_tasks, task_id=task_id, linger=linger, keep_blobs=keep_blobs,
                             declare_slowdown=declare_slowdown,
                             step_delay=step_delay, cheat=cheat or "", kernel=kernel, poll_interval=poll_interval,
                             rich_output=use_rich, device=config.device or None,
                             memory_limit_mb=config.memory_limit_mb, metrics_address=metrics_laddr,
                             metrics_port_in_use=metrics_port_in_use)

    async def serve() -> None:
        service = WorkerService(root, config, key, options)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, service.request_stop)
        try:
            await service.start()
            await service.run()
        finally:
            await service.stop()

    uvloop.run(serve())


def start_config(config: WorkerConfig, *, node: str | None = None, allow_private_blob_hosts: bool = False,
                 checkpoint_process: bool | None = None, training_core: bool | None = None,
                 device: str | None = None, memory_limit_mb: int | None = None) -> WorkerConfig:
    """worker.json's configuration with the `start` flags that override it (None or False: not given)."""
    changes = {"checkpoint_process": checkpoint_process, "training_core": training_core, "device": device,
               "memory_limit_mb": memory_limit_mb,
               "node": normalize_node_url(node) if node else None,
               "allow_private_blob_hosts": True if allow_private_blob_hosts else None}
    return dataclasses.replace(config, **{name: value for name, value in changes.items() if value is not None})


@main.command()
@home_option
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def status(home, output) -> None:
    """Show the worker's configuration and saved progress (no network)."""
    root = resolve_home(home)
    config = load_config(root)
    state = WorkerState.load(root)
    address = worker_address(root, config)
    document = {"home": str(root), "key": config.key_name, "address": address, "node": config.node,
                "blob_url": "" if config.relay else config.blob_url, "relay": config.relay,
                "tasks": [progress.to_json() for progress in state.tasks.values()]}
    if output == "json":
        click.echo(json.dumps(document, indent=2))
        return
    blobs = f"blobs through the relay {config.relay}" if config.relay else f"blobs at {config.blob_url}"
    click.echo(f"worker home {root}: key {config.key_name} ({address}), node {config.node}, {blobs}")
    if not state.tasks:
        click.echo("  no tasks yet")
    for progress in state.tasks.values():
        committed = sorted(r for r, p in progress.rounds.items() if p.committed)
        final = f", final weights {progress.final_weights_hash}" if progress.final_weights_hash else ""
        click.echo(f"  task {progress.task_id}: {progress.status} {progress.outcome} (worker {progress.worker_index}), "
                   f"committed rounds {committed or 'none'}{final}")




for command in (preflight, earnings, why, leave):
    main.add_command(command)


if __name__ == "__main__":
    main()
