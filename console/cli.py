"""`trolly-console`: serve the console on 127.0.0.1 against a node's RPC (it binds no other address)."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import click

from trolly.wallet.rpc import DEFAULT_NODE

from .server import serve

DEFAULT_PORT = 8547


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one). The console never listens on another address.")
@click.option("--node", envvar="TROLLY_NODE", default=DEFAULT_NODE, show_default=True,
              help="The node's RPC URL (or set TROLLY_NODE).")
def console(port: int, node: str) -> None:
    """A local web console over a Trolly node: network, tasks, live updates."""
    asyncio.run(_serve_until_signal(node, port))


async def _serve_until_signal(node: str, port: int) -> None:
    server = asyncio.create_task(serve(node, port, ready=lambda url: click.echo(f"Trolly console: {url}", err=False)))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, server.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await server


def main() -> None:
    console()
