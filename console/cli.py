"""`trolly-console`: serve the console on 127.0.0.1 against a node's RPC (it binds no other address), signing with
the keys of a wallet home's keyring; it prints the address to open it at, with its access token (`access.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal

import click

from trolly.wallet.command_line.options import (CONSOLE_TOKEN_ENVIRONMENT_VARIABLE, DEFAULT_HOME, HOME_ENVIRONMENT_VARIABLE,
                                       PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE)
from trolly.wallet.keyring import BACKENDS
from trolly.wallet.rpc import DEFAULT_NODE

from .access import Access, TokenRefused
from .config import ConsoleConfig
from .server import serve

DEFAULT_PORT = 8547


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one). The console never listens on another address.")
@click.option("--node", envvar="TROLLY_NODE", default=DEFAULT_NODE, show_default=True,
              help="The node's RPC URL (or set TROLLY_NODE).")
@click.option("--home", type=click.Path(file_okay=False, path_type=pathlib.Path), envvar=HOME_ENVIRONMENT_VARIABLE,
              default=DEFAULT_HOME, show_default=True,
              help=f"The wallet home whose keyring signs (env ${HOME_ENVIRONMENT_VARIABLE}); the console keeps its "
                   f"uploads, models and charts in its console/ folder.")
@click.option("--keyring-backend", type=click.Choice(BACKENDS), envvar="TROLLY_KEYRING_BACKEND", default="file",
              show_default=True, help="The keyring backend of the keys it signs with.")
@click.option("--allow-private-addresses", is_flag=True, envvar=PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE,
              help=f"Fetch models and round updates from loopback and private addresses too: a localnet's workers "
                   f"(env ${PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE}).")
def console(port: int, node: str, home: pathlib.Path, keyring_backend: str, allow_private_addresses: bool) -> None:
    """A local web console over a Trolly node: network, tasks, new tasks from your data, the wallet.

    It prints the address to open it at, with its access token: only a browser that opened that address is
    answered. The token is new at every start, unless $TROLLY_CONSOLE_TOKEN gives one (at least
    32 letters, digits, '-' or '_'; an environment variable, never a flag, as other users can read a command
    line)."""
    config = ConsoleConfig(node, home.expanduser(), keyring_backend, allow_private_addresses)
    try:
        access = Access(os.environ.get(CONSOLE_TOKEN_ENVIRONMENT_VARIABLE) or None)
    except TokenRefused as error:
        raise click.UsageError(f"${CONSOLE_TOKEN_ENVIRONMENT_VARIABLE}: {error}") from None
    asyncio.run(_serve_until_signal(config, port, access))


async def _serve_until_signal(config: ConsoleConfig, port: int, access: Access) -> None:
    server = asyncio.create_task(serve(config, port, access,
                                       ready=lambda address: click.echo(f"Trolly console: {address}", err=False)))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, server.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await server


def main() -> None:
    console()
