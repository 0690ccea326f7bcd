"""`trolly-verifier relay`: run a blob relay (compute/blobs/relay.py) on its own, or in the verifier's process
(`trolly-verifier start --relay-port P`, `relay_beside`).

    trolly-verifier relay --node URL [--home DIR] [--host H] [--port P] [--public-url URL ...]
                          [--task-quota-mb N] [--keep-settled S] [--allow-private-blob-hosts]

Workers with no inbound route push their blobs to it and name it on chain; verifiers and other workers fetch
from it; workers ask its probe whether they can be reached (`trolly-worker preflight --probe`). It holds no
key: anyone may run one. Workers sign each push for the relay's URL (the one they registered): a relay listening on
every address, or behind a proxy, names that URL with `--public-url` (by default it is known by the address it
listens on). Stopped by SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import signal
import sys

import click

from trolly.compute.blobs.connect_policy import AddressPolicy
from trolly.compute.blobs.connections import ConnectionLimits
from trolly.compute.blobs.relay import WILDCARD_HOSTS, Relay, RelayOptions, RelayServer
from trolly.compute.blobs.relay_auth import DEFAULT_MAX_SKEW, relay_identity
from trolly.compute.blobs.relay_members import ChainMembers
from trolly.compute.blobs.relay_store import DEFAULT_TASK_QUOTA, DEFAULT_TOTAL_QUOTA, RelayStore
from trolly.compute.blobs.store import DEFAULT_MAX_BLOB_SIZE
from trolly.wallet.rpc import DEFAULT_NODE, AsyncRpcClient, normalize_node_url

MIB = 2**20
log = logging.getLogger("trolly.verifier.relay")


@click.command()
@click.option("--node", envvar="TROLLY_NODE", default=DEFAULT_NODE, show_default=True,
              help="CometBFT JSON-RPC URL: who may push is read from the chain.")
@click.option("--home", envvar="TROLLY_RELAY_HOME", default="~/.trolly-relay", show_default=True,
              help="Directory of the relay's blobs and records.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", type=click.IntRange(0, 65535), default=8650, show_default=True, help="Port (0: a free one).")
@click.option("--public-url", "public_urls", multiple=True, metavar="URL",
              help="A URL workers reach this relay by, as they register it (repeatable; default: http://HOST:PORT). "
                   "Pushes signed for any other URL are refused.")
@click.option("--task-quota-mb", type=click.IntRange(1), default=DEFAULT_TASK_QUOTA // MIB, show_default=True,
              help="MiB one worker may keep here for one task.")
@click.option("--total-quota-mb", type=click.IntRange(1), default=DEFAULT_TOTAL_QUOTA // MIB, show_default=True,
              help="MiB the relay keeps in all.")
@click.option("--max-blob-mb", type=click.IntRange(1), default=DEFAULT_MAX_BLOB_SIZE // MIB, show_default=True,
              help="Largest blob taken, MiB.")
@click.option("--keep-settled", type=click.FloatRange(0), default=86_400.0, show_default=True,
              help="Seconds a settled task's blobs stay (for its requester to fetch the result).")
@click.option("--sweep-interval", type=click.FloatRange(0.1), default=60.0, show_default=True,
              help="Seconds between looks for settled tasks.")
@click.option("--max-skew", type=click.IntRange(1), default=DEFAULT_MAX_SKEW, show_default=True,
              help="Seconds a push's signing time may be off this machine's clock.")
@click.option("--allow-private-blob-hosts", is_flag=True,
              help="Let the reachability probe (POST /probe) fetch from loopback and private addresses (a localnet).")
def relay(node, home, host, port, public_urls, task_quota_mb, total_quota_mb, max_blob_mb, keep_settled, sweep_interval,
          max_skew, allow_private_blob_hosts) -> None:
    """Run a blob relay for workers that cannot be reached: they push signed blobs, anyone fetches by hash."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    if task_quota_mb > total_quota_mb:
        raise click.BadParameter("the task quota exceeds the total quota", param_hint="--task-quota-mb")
    _check_public_urls(host, public_urls)
    try:
        store = RelayStore(pathlib.Path(home).expanduser(), task_quota=task_quota_mb * MIB,
                           total_quota=total_quota_mb * MIB, max_blob_size=max_blob_mb * MIB)
    except OSError as error:
        raise click.ClickException(f"cannot use {home} as the relay's home: {error}") from None
    options = RelayOptions(max_skew=max_skew, keep_settled=keep_settled, sweep_interval=sweep_interval,
                           limits=ConnectionLimits(body_timeout=600.0),
                           probe_addresses=AddressPolicy(allow_private=allow_private_blob_hosts),
                           public_urls=tuple(public_urls))
    asyncio.run(_serve(Relay(store, ChainMembers(AsyncRpcClient(normalize_node_url(node))), options), host, port))


def _check_public_urls(host: str, public_urls: tuple[str, ...]) -> None:
    """Refuse (a usage error) a public URL a worker could not register, or none for a relay on every address."""
    for url in public_urls:
        try:
            relay_identity(url)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--public-url") from None
    if not public_urls and host in WILDCARD_HOSTS:
        raise click.BadParameter(f"a relay listening on every address ({host or 'all'}) is known by the URL "
                                 f"workers reach it by: name it (pushes are signed for it)", param_hint="--public-url")


@contextlib.asynccontextmanager
async def relay_beside(home: pathlib.Path, node: str, host: str, port: int | None, stopping: asyncio.Event,
                       allow_private: bool = False, public_urls: tuple[str, ...] = ()):
    """A relay with the default bounds under `home` on host:port while the block runs (none when `port` is
    None), sweeping until `stopping` is set; for a verifier that serves one beside its votes. `allow_private`:
    its reachability probe may fetch from private addresses too (the verifier's --allow-private-blob-hosts);
    `public_urls`: the URLs workers reach it by (default: the one it listens on)."""
    if port is None:
        yield
        return
    _check_public_urls(host, public_urls)
    store = await asyncio.to_thread(RelayStore, home)  # reads every record: not on the loop the verifier runs on
    server = RelayServer(Relay(store, ChainMembers(AsyncRpcClient(normalize_node_url(node))),
                               RelayOptions(probe_addresses=AddressPolicy(allow_private=allow_private),
                                            public_urls=public_urls)), host, port)
    try:
        await server.start()
    except OSError as error:
        await server.stop()
        raise click.ClickException(f"cannot serve the relay on {host}:{port}: {error.strerror or error}") from None
    log.info("relay serving at %s beside the verifier (home %s)", server.url, home)
    sweeping = asyncio.create_task(server.run(stopping))
    try:
        yield
    finally:
        stopping.set()
        await sweeping
        await server.stop()


async def _serve(relay_state: Relay, host: str, port: int) -> None:
    server = RelayServer(relay_state, host, port)
    try:
        await server.start()
    except OSError as error:
        await relay_state.members.client.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stopping.set)
    log.info("relay serving at %s (home %s, following %s)", server.url, relay_state.store.root,
             relay_state.members.client.url)
    try:
        await server.run(stopping)
    finally:
        await server.stop()
