"""`trolly-worker preflight | earnings | why`, the commands that report (they change nothing), and the options
every `trolly-worker` command shares (`cli.py` adds these commands to its group)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib

import click

from trolly.chain.market.params import MarketParams
from trolly.wallet.errors import WalletError
from trolly.wallet.keyring import Keyring
from trolly.wallet.market_queries import get_market_params, get_task
from trolly.wallet.rpc import RpcClient, normalize_node_url

from .config import CONFIG_FILE, HOME_ENVIRONMENT_VARIABLE, WorkerConfig, load_config, resolve_home, wallet_home
from .earnings import worker_earnings
from .preflight import check_reachability, measure
from .why import explain_task, finding_lines


def home_option(function):
    return click.option("--home", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
                        envvar=HOME_ENVIRONMENT_VARIABLE,
                        help=f"Worker home (default: ${HOME_ENVIRONMENT_VARIABLE}, else ~/.trolly-worker).")(function)


def device_option(function):
    return click.option("--device", default=None, metavar="cpu|cuda|cuda:N",
                        help="Train on this device (default: worker.json's, else CUDA where a GPU is present, else "
                             "the CPU). A CUDA profile names the GPU, its driver and CUDA build.")(function)


def memory_option(function):
    return click.option("--memory-mb", type=click.IntRange(1), default=None,
                        help="Declare at most this much memory (MiB); it can only lower what is measured.")(function)


def probe_option(function):
    return click.option("--probe", default=None, metavar="URL",
                        help="A probe (a blob relay, trolly-verifier relay) asked to fetch a blob from this worker's "
                             "blob URL: whether others reach it.")(function)


def chain_params(node: str) -> MarketParams | None:
    """The chain's market params (for the bounds of the largest models), None when the node does not answer."""
    try:
        with RpcClient(node, timeout=2) as client:
            return client.run(get_market_params(client.async_client))
    except WalletError:
        return None


def worker_address(root: pathlib.Path, config: WorkerConfig) -> str:
    """The worker's address, read from its keyring's public part (no password needed)."""
    return Keyring(wallet_home(root, config), config.keyring_backend).get(config.key_name).address


@click.command()
@home_option
@device_option
@click.option("--node", default=None, help="A node whose market params bound the largest models (default: "
                                           "worker.json's node, if the home has one; else the defaults).")
@probe_option
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def preflight(home, device, node, probe, output) -> None:
    """Measure this machine: cores, instruction set, memory, disk, torch, CUDA devices, reference speed, the
    largest model of each architecture it can take, and (with --probe) whether its blob service is reachable."""
    root = resolve_home(home)
    config = load_config(root) if (root / CONFIG_FILE).exists() else None
    if probe and config is None:
        raise click.ClickException(f"--probe checks the blob URL of a worker home; {root} has no {CONFIG_FILE} "
                                   f"(run trolly-worker init first)")
    node = normalize_node_url(node) if node else (config.node if config else "")
    measured = measure(root, device or (config.device if config else "") or None,
                       chain_params(node) if node else None)
    if probe:
        measured = dataclasses.replace(measured, reachability=asyncio.run(check_reachability(root, config, probe)))
    if output == "json":
        click.echo(json.dumps(measured.to_json(), indent=2))
        return
    for line in measured.lines():
        click.echo(line)


@click.command()
@home_option
@click.option("--node", default=None, help="Override the node address from worker.json.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def earnings(home, node, output) -> None:
    """What this worker earned, per task and round, from the chain: pay, penalties and slashes with their
    reason, collateral locked and returned, and the fee of every transaction it signed."""
    root = resolve_home(home)
    config = load_config(root)
    with RpcClient(normalize_node_url(node) if node else config.node) as client:
        found = client.run(worker_earnings(client.async_client, worker_address(root, config)))
    if output == "json":
        click.echo(json.dumps(found.to_json(), indent=2))
        return
    for line in found.lines():
        click.echo(line)


@click.command()
@home_option
@click.argument("task_id", type=click.IntRange(1))
@click.option("--node", default=None, help="Override the node address from worker.json.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def why(home, task_id, node, output) -> None:
    """Why this worker was not paid on TASK_ID: missed rounds, each unpaid commitment's sampled segments with every
    verifier's verdict (and the command that gives its reason), and what its membership ended with."""
    root = resolve_home(home)
    config = load_config(root)
    address = worker_address(root, config)
    with RpcClient(normalize_node_url(node) if node else config.node) as client:
        view = client.run(get_task(client.async_client, task_id))
    findings = explain_task(view, address)
    if output == "json":
        click.echo(json.dumps({"task_id": task_id, "worker": address,
                               "findings": [dataclasses.asdict(f) for f in findings]}, indent=2))
        return
    for line in finding_lines(view, address, findings):
        click.echo(line)
