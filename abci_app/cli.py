"""`trolly-node`: the validator's command line, a thin layer over `home`, the ABCI server and the solo engine.

    trolly-node init   --home H --chain-id C [--moniker M] [--dev] [--force]   write a CometBFT v0.38 home
    trolly-node init   --home H --state-sync RPC1,RPC2 [--trust-height N --trust-hash X]
                                                                              join a running chain by state sync
    trolly-node start  --home H [--abci unix://PATH | tcp://HOST:PORT] [--signature-checker on|off]
                       [--metrics-laddr HOST:PORT] [--metrics-port-in-use continue|refuse]
                                                                              the app alone, for CometBFT
    trolly-node engine --home H [--proxy-app ADDR] [--block-time 1s] [--prometheus-laddr HOST:PORT]
                                                                              the solo engine alone
    trolly-node dev    [--home H] [--block-time 1s] [--reset]                 app + solo engine, dev chain
    trolly-node version                                                       app version, CometBFT binary found

The home defaults to `$TROLLY_NODE_HOME`, else `~/.trolly-node`. `dev` runs two processes: the app
(`trolly-node start`, a child process) and the solo engine (this process), talking over a unix socket in
the home's `data/` directory (in a private temporary directory when that path is too long for a socket),
exactly as CometBFT would talk to the app; stopping `dev` (Ctrl-C) stops both.

The app's ABCI socket is a unix socket with mode 0600 unless an address asks for TCP: `start` and `engine`
use `--abci`/`--proxy-app`, else config.toml `proxy_app`, else `unix://H/data/app.sock`; `init` writes that
unix address as `proxy_app` unless `--proxy-app` gives another (`tcp://...` where CometBFT needs TCP).

Metrics (docs/operations.md): `init` turns CometBFT's Prometheus endpoint on (`--prometheus-laddr`) and writes the
app's own (`--metrics-laddr`) into `[trolly]`; `start` serves the app's, `engine` the solo engine's. A taken
metrics address is logged and the node goes on without it, unless `metrics_port_in_use = "refuse"` (or
`--metrics-port-in-use refuse`), which stops it with the address named.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import click

from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key

from . import home as homelib
from .state_sync_trust import DEFAULT_TRUST_PERIOD
from .listen_address import AddressError, default_unix_address
from .errors import AbciAppError
from .gc_tuning import tune_garbage_collection
from trolly.wallet.metrics_endpoint import CONTINUE, PORT_IN_USE_CHOICES, MetricsEndpointError, start_metrics_endpoint

from .home_config import DEFAULT_APP_METRICS_ADDRESS, DEFAULT_PROMETHEUS_ADDRESS

log = logging.getLogger("trolly.node")

DEV_CHAIN_ID = "trolly-dev"


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S", force=True
    )


def parse_duration(text: str) -> float:
    """Seconds in `1s`, `500ms`, `2m`, or a bare number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration (examples: 1s, 500ms, 0.2)")
    value = float(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]
    if value <= 0:
        raise click.BadParameter("the duration must be positive")
    return value


def home_option(function):
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=pathlib.Path),
        default=None,
        help="Node home directory (default: $TROLLY_NODE_HOME, else ~/.trolly-node).",
    )(function)


def _home(path: pathlib.Path | None) -> pathlib.Path:
    return path if path is not None else homelib.home_from_environment()


def _fail(error: Exception) -> None:
    raise click.ClickException(str(error))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"]))
def main(log_level: str) -> None:
    """Trolly validator node: the ABCI application, and the solo engine that can drive it without CometBFT."""
    _configure_logging(log_level)


# ------------------------------------------------------------------------------------------------ init

ORIGIN = re.compile(r"https?://[^/?#\s]+")
"""A web origin as a browser sends it: scheme and host (and port), no path."""


def _check_origins(context, parameter, origins: tuple[str, ...]) -> tuple[str, ...]:
    for origin in origins:
        if origin != "*" and not ORIGIN.fullmatch(origin):
            raise click.BadParameter(f"{origin!r} is not a web origin such as http://127.0.0.1:26748 (scheme and "
                                     f"host, no path), nor *")
    return origins


@main.command()
@home_option
@click.option("--chain-id", default=None,
              help="Chain id written into genesis.json (1-50 characters); required unless --state-sync.")
@click.option("--moniker", default="trolly-node", show_default=True, help="Human-readable node name.")
@click.option("--dev", is_flag=True, help="Dev genesis: the public dev key funded and operating this validator.")
@click.option("--force", is_flag=True, help="Overwrite an existing home (wipes its data/).")
@click.option("--proxy-app", default=None, help="ABCI address CometBFT dials (default: unix://HOME/data/app.sock).")
@click.option("--rpc-laddr", default="tcp://127.0.0.1:26657", show_default=True, help="JSON-RPC listen address.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN", callback=_check_origins,
              help="A web page's origin allowed to call the JSON-RPC from a browser (`[rpc] cors_allowed_origins`; "
                   "repeatable; none by default): e.g. the console's http://127.0.0.1:PORT, whose worker page "
                   "trains in a tab against this node.")
@click.option("--p2p-laddr", default="tcp://0.0.0.0:26656", show_default=True, help="P2P listen address.")
@click.option("--prometheus-laddr", default=DEFAULT_PROMETHEUS_ADDRESS, show_default=True,
              help="Where CometBFT serves its Prometheus metrics (0 or empty: off).")
@click.option("--metrics-laddr", default=DEFAULT_APP_METRICS_ADDRESS, show_default=True,
              help="Where the app serves its own Prometheus metrics (0 or empty: off).")
@click.option("--state-sync", "state_sync", default=None, metavar="RPC1,RPC2",
              help="Join a running chain by state sync: its genesis, peers and trusted block from these RPC "
                   "servers (two at least, cross-checked). On an existing home of that chain, only its "
                   "[statesync] section is rewritten.")
@click.option("--trust-height", type=click.IntRange(min=1), default=None,
              help="With --state-sync: the block to trust (default: the newest every server has).")
@click.option("--trust-hash", default=None, help="With --state-sync: that block's hash, known out of band; "
                                                 "refused unless every server has it.")
@click.option("--trust-period", default=DEFAULT_TRUST_PERIOD, show_default=True,
              help="With --state-sync: how old the trusted block may be when the node starts.")
def init(home, chain_id, moniker, dev, force, proxy_app, rpc_laddr, cors_origins, p2p_laddr, prometheus_laddr,
         metrics_laddr, state_sync, trust_height, trust_hash, trust_period) -> None:
    """Write a CometBFT v0.38 home: genesis.json, config.toml, priv_validator_key.json, node_key.json."""
    root = _home(home)
    try:
        if state_sync is not None and homelib.HomePaths(root).exists() and not force:
            # an existing home of the chain: only its [statesync] section is rewritten, its config is kept
            _init_state_sync(root, None, chain_id, state_sync, trust_height, trust_hash, trust_period, force)
            return
        proxy_app = proxy_app or _default_app_address(root)
        config = homelib.NodeConfig(moniker=moniker, proxy_app=proxy_app, rpc_laddr=rpc_laddr, p2p_laddr=p2p_laddr,
                                    prometheus_listen_addr="" if prometheus_laddr == "0" else prometheus_laddr,
                                    metrics_listen_addr=metrics_laddr,
                                    extra={"rpc": {"cors_allowed_origins": list(cors_origins)}} if cors_origins else {})
        if state_sync is not None:
            _init_state_sync(root, config, chain_id, state_sync, trust_height, trust_hash, trust_period, force)
            return
        if trust_height is not None or trust_hash is not None:
            raise click.UsageError("--trust-height and --trust-hash go with --state-sync")
        if chain_id is None:
            raise click.UsageError("--chain-id is required (unless --state-sync takes it from the chain)")
        paths = homelib.init_home(root, chain_id, moniker=moniker, dev=dev, config=config, force=force)
    except AbciAppError as exc:
        _fail(exc)
    written = homelib.load_home(root)
    click.echo(f"Initialized node home {paths.root} for chain {chain_id}")
    click.echo(f"  validator address {written.validator_key.address.hex().upper()}, node id {written.node_key.node_id}")


def _init_state_sync(root, config, chain_id, servers, trust_height, trust_hash, trust_period, force) -> None:
    """`init --state-sync`: the cross-checked trusted block, into a new home or an existing one's [statesync]."""
    from .home_join import enable_state_sync, join_home
    from .state_sync_trust import parse_rpc_servers, trusted_block

    trusted = trusted_block(parse_rpc_servers(servers), trust_height, trust_hash)
    if chain_id is not None and chain_id != trusted.chain_id:
        raise homelib.HomeError(f"--chain-id {chain_id!r} is not the RPC servers' chain {trusted.chain_id!r}")
    if homelib.HomePaths(root).exists() and not force:
        enable_state_sync(root, trusted, trust_period)
        click.echo(f"State sync enabled in {root} for chain {trusted.chain_id}")
    else:
        join_home(root, trusted, config, trust_period, force=force)
        click.echo(f"Initialized node home {root} to join chain {trusted.chain_id} by state sync")
    click.echo(f"  trusting block {trusted.height} {trusted.hash}, from {', '.join(trusted.rpc_servers)}")


# ----------------------------------------------------------------------------------------------- start


def _default_app_address(root: pathlib.Path) -> str:
    """The app's socket when nothing names one: `unix://ROOT/data/app.sock` (mode 0600 once listening)."""
    return default_unix_address(root / "data")


def _app_address(root: pathlib.Path, given: str | None, config: dict) -> str:
    """The address given on the command line, else config.toml `proxy_app`, else the home's unix socket."""
    return given or config.get("proxy_app") or _default_app_address(root)


async def _serve_app(root: pathlib.Path, address: str, exit_before_commit_height: int | None = None,
                     signature_checker: bool = True, metrics_address: str = "",
                     metrics_port_in_use: str = CONTINUE) -> None:
    """Build the app and the helpers it is handed (its memo of checked transactions, its signature checker, its
    metrics, served at `metrics_address`), serve it until a signal, then close them. A taken metrics address
    stops it here, before anything else starts, when `metrics_port_in_use` is `refuse`."""
    from trolly.chain.checked_txs import CheckedTxs

    from .application import TrollyApplication
    from .metrics import AppMetrics
    from .crash_switch import ExitBeforeCommit
    from .retention import Retention
    from .server import run_until_signalled
    from .signature_checker import SignatureChecker
    from .snapshot_restore import StateSync
    from .snapshot_store import SnapshotStore
    from .store import Store

    home = homelib.load_home(root)
    metrics = AppMetrics()
    endpoint = start_metrics_endpoint(metrics_address, metrics.registry, f"the app of {root}", metrics_port_in_use)
    options = homelib.read_node_options(home.config)
    store = Store(home.paths.application_db, keep_recent=options.state_keep_recent)
    snapshots = SnapshotStore(home.paths.snapshots_dir, options.snapshot_interval, options.snapshot_keep_recent)
    checker = SignatureChecker(enabled=signature_checker)
    helpers = {"checks": CheckedTxs(), "signature_checker": checker, "metrics": metrics,
               "state_sync": StateSync(snapshots, home.paths.application_db),
               "retention": Retention.from_options(options, home.genesis)}
    if exit_before_commit_height is None:
        app = TrollyApplication(store, home.chain_id, **helpers)
    else:
        app = ExitBeforeCommit(store, home.chain_id, exit_before_commit_height, **helpers)
    try:
        checker.start()  # now, so that the first large block finds it ready
        tune_garbage_collection()
        await run_until_signalled(app, address)
    finally:
        checker.close()
        if endpoint is not None:
            endpoint.close()
        snapshots.close()  # waits for a snapshot being written: it reads the store
        app.store.close()  # the store state sync swapped in, if it did


@main.command()
@home_option
@click.option("--abci", "address", default=None,
              help="Listen address: unix://PATH (mode 0600) or tcp://HOST:PORT (default: config.toml proxy_app, "
                   "else unix://HOME/data/app.sock).")
@click.option("--signature-checker", type=click.Choice(["on", "off"]), default=None,
              help="Check large unchecked blocks' signatures in a helper process on another core (default: "
                   "config.toml [trolly] signature_checker, else on).")
@click.option("--metrics-laddr", default=None,
              help="Where the app serves its Prometheus metrics, HOST:PORT; 0 turns them off (default: config.toml "
                   f"[trolly] metrics_listen_addr, else {DEFAULT_APP_METRICS_ADDRESS}).")
@click.option("--metrics-port-in-use", type=click.Choice(PORT_IN_USE_CHOICES), default=None,
              help="That address taken: go on without metrics, or refuse to start (default: config.toml [trolly] "
                   "metrics_port_in_use, else continue).")
def start(home, address, signature_checker, metrics_laddr, metrics_port_in_use) -> None:
    """Run the application alone, its state under HOME/data/, waiting for CometBFT or the solo engine.

    For crash tests only, TROLLY_TEST_EXIT_BEFORE_COMMIT_HEIGHT=<height> makes the app exit after that
    block's FinalizeBlock, before its Commit (see trolly.abci_app.crash_switch).
    """
    import os

    import uvloop

    from .crash_switch import exit_before_commit_height

    root = _home(home)
    try:
        exit_height = exit_before_commit_height(dict(os.environ))  # the test switch, read once, here
        loaded = homelib.load_home(root)
        checker_on = (signature_checker == "on" if signature_checker is not None
                      else homelib.signature_checker_enabled(loaded.config))
        configured_address, configured_choice = homelib.app_metrics_settings(loaded.config)
        uvloop.run(_serve_app(root, _app_address(root, address, loaded.config), exit_height, checker_on,
                              metrics_laddr if metrics_laddr is not None else configured_address,
                              metrics_port_in_use or configured_choice))
    except (AbciAppError, MetricsEndpointError) as exc:
        _fail(exc)


# ---------------------------------------------------------------------------------------------- engine


async def _run_engine(root: pathlib.Path, proxy_app: str, rpc_laddr: str, block_time: float, on_ready=None, child=None,
                      step_observer=None, prometheus_laddr: str | None = None) -> None:
    """The solo engine until SIGINT or SIGTERM; `step_observer` is told of each block's steps (crash tests). It
    serves its metrics at `prometheus_laddr`, else where config.toml `[instrumentation]` says."""
    from .engine.node import SoloNode, SoloNodeConfig
    from .engine.producer import EngineConfig

    home = homelib.load_home(root)
    commit_timeout = parse_duration(str(home.config.get("rpc", {}).get("timeout_broadcast_tx_commit", "10s")))
    node = SoloNode(
        home,
        SoloNodeConfig(
            engine=EngineConfig(proxy_app=proxy_app, block_interval=block_time),
            rpc_laddr=rpc_laddr,
            broadcast_tx_commit_timeout=commit_timeout,
            step_observer=step_observer,
            prometheus_laddr=(prometheus_laddr if prometheus_laddr is not None
                              else homelib.prometheus_address(home.config)),
            metrics_port_in_use=homelib.app_metrics_settings(home.config)[1],
        ),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await node.start()
    helpers = []
    if on_ready is not None:
        helpers.append(asyncio.ensure_future(_when_connected(node, on_ready)))
    if child is not None:
        helpers.append(asyncio.ensure_future(_watch_child(child, stop)))
    try:
        await node.run(stop)
    finally:
        for helper in helpers:
            helper.cancel()
        await node.close()


async def _when_connected(node, on_ready) -> None:
    await node.producer.connected.wait()
    on_ready(node)


async def _watch_child(child: subprocess.Popen, stop: asyncio.Event) -> None:
    """In `dev`, the app is our child: if it exits on its own, stop the engine too."""
    while child.poll() is None and not stop.is_set():
        await asyncio.sleep(0.2)
    if not stop.is_set():
        log.error("the app process exited with code %s; stopping", child.returncode)
        stop.set()


@main.command()
@home_option
@click.option("--proxy-app", default=None,
              help="The app's ABCI address (default: config.toml proxy_app, else unix://HOME/data/app.sock).")
@click.option("--rpc-laddr", default=None, help="JSON-RPC listen address (default: config.toml [rpc] laddr).")
@click.option("--block-time", default="1s", show_default=True, help="Interval between blocks (e.g. 1s, 200ms).")
@click.option("--prometheus-laddr", default=None,
              help="Where the engine serves CometBFT's metrics it keeps, HOST:PORT; 0 turns them off (default: "
                   "config.toml [instrumentation] prometheus_listen_addr when prometheus = true).")
def engine(home, proxy_app, rpc_laddr, block_time, prometheus_laddr) -> None:
    """Run the solo engine alone, driving an app started separately (`trolly-node start`).

    If the app dies, the engine waits for it and its handshake replays what the app missed.
    """
    import uvloop

    root = _home(home)
    interval = parse_duration(block_time)
    try:
        loaded = homelib.load_home(root)
        proxy_app = _app_address(root, proxy_app, loaded.config)
        rpc_laddr = rpc_laddr or loaded.config.get("rpc", {}).get("laddr") or "tcp://127.0.0.1:26657"
        uvloop.run(_run_engine(root, proxy_app, rpc_laddr, interval, prometheus_laddr=prometheus_laddr))
    except (AbciAppError, MetricsEndpointError) as exc:
        _fail(exc)


# --------------------------------------------------------------------------------------------- version


@main.command()
def version() -> None:
    """Print the app's version and the CometBFT binary found (venv's bin, then PATH) with its version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    from .cometbft import COMETBFT_VERSION, describe_cometbft

    try:
        app_version = package_version("trolly")
    except PackageNotFoundError:
        app_version = "unknown (not installed as a package)"
    click.echo(f"trolly-node {app_version}")
    click.echo(f"CometBFT wanted: v{COMETBFT_VERSION} (any v0.38.x runs)")
    click.echo(describe_cometbft())


# ------------------------------------------------------------------------------------------------- dev


def _dev_app_address(root: pathlib.Path) -> tuple[str, str | None]:
    """The app's unix socket: in the home if its path fits, else in a new private (0700) temporary directory,
    returned second so that `dev` removes it at the end (None when the home's socket is used)."""
    try:
        return _default_app_address(root), None
    except AddressError:
        private = tempfile.mkdtemp(prefix="trolly-dev-")
        return f"unix://{private}/app.sock", private


def _banner(node, chain_id: str) -> None:
    address = encode_address(dev_key(0).address)
    lines = [
        "",
        "Trolly dev chain is running (solo engine, one validator).",
        f"  RPC:         {node.rpc_url}",
        f"  chain id:    {chain_id}",
        f"  dev account: {address}",
        f"  mnemonic:    {DEV_MNEMONIC}",
        "  INSECURE: this mnemonic is public; the dev account is for local development only.",
        "  Stop with Ctrl-C.",
        "",
    ]
    click.echo("\n".join(lines), err=False)
    sys.stdout.flush()


@main.command()
@home_option
@click.option("--chain-id", default=DEV_CHAIN_ID, show_default=True, help="Chain id for a new dev home.")
@click.option("--block-time", default="1s", show_default=True, help="Interval between blocks (e.g. 1s, 200ms).")
@click.option("--rpc-laddr", default=None, help="JSON-RPC listen address (default: config.toml [rpc] laddr).")
@click.option("--reset", is_flag=True, help="Delete the dev home first and start a fresh chain.")
def dev(home, chain_id, block_time, rpc_laddr, reset) -> None:
    """Init a dev home if needed, then run the app and the solo engine together (Ctrl-C stops both)."""
    import uvloop

    root = _home(home)
    interval = parse_duration(block_time)
    try:
        if reset and root.exists():
            shutil.rmtree(root)
        address, private_directory = _dev_app_address(root)
        if not homelib.HomePaths(root).genesis.exists():
            config = homelib.NodeConfig(moniker="dev-validator", **({} if private_directory else {"proxy_app": address}))
            homelib.init_home(root, chain_id, moniker="dev-validator", dev=True, config=config)
            click.echo(f"Initialized dev home {root}")
        loaded = homelib.load_home(root)
        rpc_laddr = rpc_laddr or loaded.config.get("rpc", {}).get("laddr") or "tcp://127.0.0.1:26657"
    except AbciAppError as exc:
        _fail(exc)
    command = [sys.executable, "-m", "trolly.abci_app.cli", "start", "--home", str(root), "--abci", address]
    child = subprocess.Popen(command, start_new_session=True)
    child_failed = False
    try:
        uvloop.run(_run_engine(root, address, rpc_laddr, interval, lambda node: _banner(node, loaded.chain_id), child))
    except (AbciAppError, MetricsEndpointError) as exc:
        _fail(exc)
    finally:
        child_failed = child.poll() not in (None, 0)  # it died on its own, before we stopped it
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if private_directory:
            shutil.rmtree(private_directory, ignore_errors=True)
    if child_failed:
        raise click.ClickException(f"the app process exited with code {child.returncode}; see its log lines above")


if __name__ == "__main__":
    main()
