"""`trolly-localnet`: a whole Trolly network on this machine.

    trolly-localnet up        start (initializing on first use) and supervise until Ctrl-C
    trolly-localnet up -d     start in the background; `down` stops it
    trolly-localnet status    what runs, each node's height and app hash (-o json)
    trolly-localnet logs NAME one service's log (-f to follow)
    trolly-localnet kill NAME     SIGKILL a service, or a whole node (validator-<i>: cometbft, app, verifier)
    trolly-localnet start NAME    start it again
    trolly-localnet restart NAME  stop one service (if it runs) and start it again
    trolly-localnet add-node  one more CometBFT node from genesis (a full node; --key-from to share a key)
    trolly-localnet down      stop every process of this localnet
    trolly-localnet reset     stop and delete the localnet's state
    trolly-localnet demo      up, then train and settle a real task, then down (--task lora-text: LoRA fine-tuning)
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from trolly.wallet.command_line.options import (BACKEND_ENVIRONMENT_VARIABLE, HOME_ENVIRONMENT_VARIABLE,
                                       NODE_ENVIRONMENT_VARIABLE, PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE)
from trolly.wallet.errors import WalletError
from trolly.wallet.rpc import RpcClient

from .engine_choice import choose_engine
from .home_layout import MAX_VALIDATORS, MAX_WORKERS, Layout, LocalnetConfig, LocalnetError
from .network import START_TIMEOUT, Localnet

console = Console(stderr=True)

home_option = click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("localnet-home"),
    envvar="TROLLY_LOCALNET_HOME",
    show_default=True,
    help="Directory holding the whole localnet (env TROLLY_LOCALNET_HOME).",
)


def network_options(function):
    options = [
        click.option("--engine", type=click.Choice(["cometbft", "solo"]), default=None,
                     help="Consensus: real CometBFT processes, one per validator [default: cometbft if a v0.38 "
                          "`cometbft` is found, else solo], or the built-in solo engine (one validator)."),
        click.option("--validators", type=click.IntRange(1, MAX_VALIDATORS), default=None,
                     help="Validators [default: 4 on CometBFT, 1 on solo]; stakes are unequal (4: 40/30/20/10 %)."),
        click.option("--workers", type=click.IntRange(0, MAX_WORKERS), default=3, show_default=True, help="Worker processes."),
        click.option("--slow-workers", type=click.IntRange(0, MAX_WORKERS), default=None,
                     help="How many of the workers declare themselves slower (heterogeneous hardware) "
                          "[default: 1, or 0 without workers]."),
        click.option("--base-port", type=click.IntRange(1024, 65000), default=26657, show_default=True,
                     help="First port: RPC of node 0; others are offsets from it."),
        click.option("--block-time", default="500ms", show_default=True,
                     help="Block interval of the solo engine; CometBFT's timeout_commit."),
        click.option("--cheat", default="", metavar="NAME", callback=_known_cheat,
                     help="TEST SWITCH: worker-0 plays its rounds with this cheat (e.g. skipped_steps; "
                          "`trolly-verifier cheats` lists them) to show it is caught."),
        click.option("--wasm32-workers", type=click.IntRange(0, MAX_WORKERS), default=0, show_default=True,
                     help="How many of the workers (the last ones) train with the wasm32 kernel, as a browser tab "
                          "does (`trolly-worker start --kernel wasm32`); they join only tasks allowing it."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _known_cheat(context, parameter, value: str) -> str:
    """`--cheat`: a name from the one cheat registry (`compute.cheats`), which the worker checks again. Imported
    only when a cheat is asked for: it loads torch, which the localnet's other commands do without."""
    if value:
        from trolly.compute.cheats import CHEATS

        if value not in CHEATS:
            raise click.BadParameter(f"unknown cheat {value!r}; known: {', '.join(sorted(CHEATS))}")
    return value


def config_from(home, engine, validators, workers, slow_workers, base_port, block_time, cheat, wasm32_workers=0,
                fresh: bool = False) -> LocalnetConfig:
    """The requested settings; for a new localnet (or a `fresh` one, as the demo's), the engine is chosen here
    (CometBFT, or solo if none is found, said in one line). An existing localnet keeps its saved engine."""
    if slow_workers is None:
        slow_workers = min(1, workers)
    if slow_workers > workers:
        raise click.BadParameter("cannot have more slow workers than workers", param_hint="--slow-workers")
    if wasm32_workers > workers:
        raise click.BadParameter("cannot have more wasm32 workers than workers", param_hint="--wasm32-workers")
    if not fresh and Layout(home).exists() and engine is None and validators is None:
        saved = Layout(home).load()
        engine, validators = saved.engine, saved.validators
    choice = choose_engine(engine, validators)
    if choice.note:
        console.print(f"[yellow]{choice.note}[/yellow]")
    return LocalnetConfig(engine=choice.engine, validators=choice.validators, workers=workers,
                          slow_workers=slow_workers, base_port=base_port, block_time=block_time, cheat=cheat,
                          wasm32_workers=wasm32_workers)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """Run a whole Trolly network (node, verifier, workers) on this machine, bound to loopback."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S")


def _fail(message: str) -> None:
    console.print(f"[red]Error:[/red] {message}")
    sys.exit(1)


@main.command()
@home_option
@network_options
@click.option("-d", "--detach", is_flag=True, help="Start in the background and return; `down` stops it.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=START_TIMEOUT, show_default=True,
              help="Seconds to wait for the first block.")
def up(home, detach, timeout, **options) -> None:
    """Start the localnet (initializing it on first use) and supervise it until Ctrl-C."""
    try:
        net = Localnet(home, config_from(home, **options))
        config = net.up(timeout)
    except (LocalnetError, WalletError, OSError) as exc:
        _fail(str(exc))
    _print_warnings(net)
    _print_summary(net, config)
    if detach:
        return
    stop = {"flag": False}

    def request_stop(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    console.print("Supervising; Ctrl-C stops every process.")
    reported: set[str] = set()
    while not stop["flag"]:
        for name, code in net.supervisor.exited().items():
            if name not in reported:
                reported.add(name)
                console.print(f"[yellow]{name} exited with code {code}[/yellow]; log: {net.supervisor.log_file(name)}")
        if not net.running_services():
            console.print("[red]every service has exited[/red]")
            break
        time.sleep(0.5)
    stopped = net.down()
    console.print(f"stopped {len(stopped)} service(s)")


def _print_warnings(net: Localnet) -> None:
    for warning in net.warnings:
        console.print(f"[red]WARNING:[/red] {warning}")


def _print_summary(net: Localnet, config: LocalnetConfig) -> None:
    engine = "CometBFT" if config.engine == "cometbft" else "the solo engine"
    console.print(f"Localnet [bold]{config.chain_id}[/bold] is up in {net.layout.home}: "
                  f"{config.validators} validator(s) on {engine}")
    for index in range(config.nodes):
        console.print(f"  {config.node_name(index)}: RPC {config.rpc_url(index)}, "
                      f"{config.validator_stake(index) // 1_000_000} TRL staked")
    console.print(f"  wallet:  trolly-wallet --home {net.layout.wallet_home} --keyring-backend test "
                  f"--node {config.rpc_url(0)} ...  (keys: requester, validator-N, worker-N)")
    console.print(f"  logs:    trolly-localnet logs NAME --home {net.layout.home}")
    console.print(f"  console: {net.layout.console_address(config)}  (the web console; it signs with the requester "
                  f"key)", soft_wrap=True)
    console.print(f"  browser worker: {net.layout.worker_page_address(config)}  (a worker in a tab: it trains tasks "
                  f"allowing wasm32; fund its key from the requester)", soft_wrap=True)
    console.print("  as the requester, in your shell (one line, to copy):")
    console.print(f"export {requester_environment(net.layout.wallet_home, config.rpc_url(0))}", soft_wrap=True)


def requester_environment(wallet_home, rpc_url: str) -> str:
    """The variables that point `trolly-wallet` at this localnet: its test keyring, its first node, and fetches
    from the workers' blob services on 127.0.0.1 allowed (`--allow-private-addresses`)."""
    return (f"{HOME_ENVIRONMENT_VARIABLE}={wallet_home} {BACKEND_ENVIRONMENT_VARIABLE}=test "
            f"{NODE_ENVIRONMENT_VARIABLE}={rpc_url} {PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE}=1")


@main.command()
@home_option
def down(home) -> None:
    """Stop every process of this localnet (nothing is deleted)."""
    stopped = Localnet(home).down()
    console.print(f"stopped {len(stopped)} service(s)" if stopped else "nothing was running")


@main.command()
@home_option
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def status(home, output) -> None:
    """Show the localnet's services, each node's height and app hash, and every Prometheus metrics endpoint."""
    import json

    net = Localnet(home)
    if not net.layout.exists():
        _fail(f"no localnet at {net.layout.home}")
    try:
        config = net.config
    except LocalnetError as exc:
        _fail(str(exc))
    services = {name: {"pid": record["pid"], "running": net.supervisor.is_running(name)}
                for name, record in net.supervisor.records().items()}
    nodes = net.node_statuses()
    height = nodes[0].height
    if output == "json":
        click.echo(json.dumps({"home": str(net.layout.home), "chain_id": config.chain_id, "engine": config.engine,
                               "height": height, "rpc": config.rpc_url(0), "services": services,
                               "nodes": [node.to_json() for node in nodes], "metrics": config.metrics_endpoints()},
                              sort_keys=True))
        return
    table = Table(title=f"localnet {config.chain_id} at {net.layout.home} ({config.engine})")
    for column in ("service", "pid", "state"):
        table.add_column(column)
    for name, info in services.items():
        table.add_row(name, str(info["pid"]), "[green]running[/green]" if info["running"] else "[red]stopped[/red]")
    Console().print(table)
    nodes_table = Table(title="nodes")
    for column in ("node", "rpc", "height", "app hash"):
        nodes_table.add_column(column)
    for node in nodes:
        nodes_table.add_row(node.name, node.rpc, str(node.height) if node.height is not None else "not answering",
                            (node.app_hash or "")[:16])
    Console().print(nodes_table)
    metrics_table = Table(title="metrics (Prometheus)")
    for column in ("service", "endpoint"):
        metrics_table.add_column(column)
    for name, url in config.metrics_endpoints().items():
        metrics_table.add_row(name, url)
    Console().print(metrics_table)
    click.echo(f"chain height: {height if height is not None else 'node not answering'}")


@main.command()
@home_option
@click.argument("name", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", default=50, show_default=True, help="Lines from the end to show first.")
def logs(home, name, follow, lines) -> None:
    """Print a service's log (without NAME: list the logs)."""
    net = Localnet(home)
    log_dir = net.supervisor.log_dir
    if name is None:
        for path in sorted(log_dir.glob("*.log")) if log_dir.is_dir() else []:
            click.echo(path.stem)
        return
    path = net.supervisor.log_file(name)
    if not path.exists():
        _fail(f"no log for {name!r} in {log_dir}")
    with open(path, "r", errors="replace") as handle:
        for line in handle.readlines()[-lines:]:
            click.echo(line, nl=False)
        while follow:
            line = handle.readline()
            if line:
                click.echo(line, nl=False)
            else:
                time.sleep(0.2)


@main.command()
@home_option
@click.argument("names", nargs=-1, required=True)
def restart(home, names) -> None:
    """Stop the named services (if they run) and start them again, e.g. `restart app-0 engine-0`."""
    net = Localnet(home)
    try:
        for name in names:
            net.restart(name)
            console.print(f"restarted {name}")
    except (LocalnetError, OSError) as exc:
        _fail(str(exc))


@main.command()
@home_option
@click.argument("name")
def kill(home, name) -> None:
    """SIGKILL a service and its children, or a whole node by its name (validator-<i>: cometbft, app, verifier)."""
    net = Localnet(home)
    try:
        killed = net.kill(name)
    except (LocalnetError, OSError) as exc:
        _fail(str(exc))
    console.print(f"killed {', '.join(killed)}" if killed else f"{name}: nothing was running")


@main.command()
@home_option
@click.argument("name")
def start(home, name) -> None:
    """Start a stopped service, or a whole node by its name (validator-<i>: app, cometbft, verifier)."""
    net = Localnet(home)
    try:
        started = net.start(name)
    except (LocalnetError, OSError) as exc:
        _fail(str(exc))
    _print_warnings(net)
    console.print(f"started {', '.join(started)}")


@main.command("add-node")
@home_option
@click.option("--key-from", default=None, metavar="NODE",
              help="TEST SWITCH: give the new node NODE's consensus key (it will double-sign when both run).")
def add_node(home, key_from) -> None:
    """Write one more CometBFT node from the localnet's genesis (a full node until it stakes); `start` it."""
    net = Localnet(home)
    try:
        name = net.add_node(key_from)
    except (LocalnetError, OSError) as exc:
        _fail(str(exc))
    console.print(f"added {name} (home {net.layout.node_home(net.config.nodes - 1)}); `start {name}` runs it")


@main.command()
@home_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(home, yes) -> None:
    """Stop the localnet and delete all its state (chain, keys, logs)."""
    net = Localnet(home)
    if not yes and net.layout.home.exists():
        click.confirm(f"Delete {net.layout.home} and everything in it?", abort=True)
    net.reset()
    console.print(f"removed {net.layout.home}")


@main.command()
@home_option
@network_options
@click.option("--task", "task_name", type=click.Choice(["digits", "digits-wasm32", "lora-text"]), default="digits",
              show_default=True,
              help="What to train: an MLP on the bundled digits (digits-wasm32: the same, allowing the browser "
                   "worker's wasm32 kernel, for --wasm32-workers and browser tabs), or all-MiniLM-L6-v2 "
                   "fine-tuned with LoRA on pydocs (standard-library docstrings, 8 labels) written as your own "
                   "JSONL of texts and packed private, its key sealed to the workers and validators.")
@click.option("--rounds", type=click.IntRange(1, 50), default=None,
              help="Training rounds of the task [default: 4 for digits and digits-wasm32, 2 for lora-text].")
@click.option("--timeout", type=float, default=None,
              help="Seconds to wait for the task to settle [default: 300 for digits, 900 for lora-text].")
@click.option("--keep", is_flag=True, help="Leave the localnet running afterwards (`down` stops it).")
@click.option("--console", "keep_console", is_flag=True,
              help="Leave the localnet and its web console running afterwards, to look at the task in a browser "
                   "(`down` stops them).")
@click.option("--churn", type=click.IntRange(0, MAX_WORKERS), is_flag=False, flag_value=1, default=0,
              metavar="[KILLS]", help="Kill a member mid-task with SIGKILL (KILLS of them, two rounds apart) and "
                                      "have a spare worker, started beside the --workers the task wants, replace it.")
@click.option("--browser-workers", type=click.IntRange(0, MAX_WORKERS), default=0, show_default=True,
              help="Places of the task kept for browser tabs (the console's worker page, printed): the task waits "
                   "for them to join. Needs --task digits-wasm32.")
def demo(home, task_name, rounds, timeout, keep, keep_console, churn, browser_workers, **options) -> None:
    """Start a fresh localnet, pay for a real training task, follow it to settlement, fetch and evaluate the model.

    The last line printed (on stdout) is JSON: the task, its id, rounds, final accuracy and its floor, paid per
    worker, the engine, the validators (power, fee share), which validators voted what per round, seconds, and
    the members killed and their replacements (with --churn).
    """
    import json

    from .demo import DemoOptions, run_demo
    from .demo_tasks import DEMO_TASKS

    received: list[int] = []

    def interrupt(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt  # SIGTERM like Ctrl-C: the demo's cleanup stops every service it started

    signal.signal(signal.SIGTERM, interrupt)
    if browser_workers and task_name != "digits-wasm32":
        _fail("--browser-workers needs a task browsers can train: --task digits-wasm32")
    demo_options = DemoOptions(task=DEMO_TASKS[task_name], rounds=rounds, timeout=timeout, churn=churn,
                               browser_workers=browser_workers)
    if churn:
        if not options["workers"]:
            _fail("--churn needs workers to kill and replace (--workers 0 was asked)")
        options["workers"] += 1  # the spare, which replaces the killed members
    try:
        summary = run_demo(home, config_from(home, **options, fresh=True), demo_options, console,
                           keep or keep_console)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through `interrupt`
        if not received:
            received.append(signal.SIGINT)
    except (LocalnetError, WalletError, OSError) as exc:
        _fail(str(exc))
    if received:  # whatever was under way when the signal came, the demo did not finish: say so in the status
        console.print("[yellow]interrupted: the services the demo started are stopped[/yellow]")
        sys.exit(128 + received[0])
    below_floor = summary["final_accuracy"] < summary["accuracy_floor"]
    if below_floor:
        console.print(f"[red]accuracy {summary['final_accuracy']} is below the floor {summary['accuracy_floor']}[/red]")
    if keep_console:
        kept = Localnet(home)
        console.print(f"The localnet and its web console stay up: {kept.layout.console_address(kept.config)} "
                      f"(`trolly-localnet down` stops them)")
    click.echo(json.dumps(summary, sort_keys=True))
    if below_floor:
        sys.exit(1)


if __name__ == "__main__":
    main()
