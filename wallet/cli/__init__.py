"""The `trolly-wallet` command: click groups over the wallet library.

Command groups are registered by name in `COMMAND_GROUPS` and imported only when used (so `keys` never
loads the network stack). Adding a group is one line here, e.g. `"task": "trolly.wallet.cli.task:task",`.
"""

from __future__ import annotations

import click

from ..command_line.errors import WalletGroup
from .lazy_commands import load_target

COMMAND_GROUPS: dict[str, str] = {
    "keys": "trolly.wallet.cli.keys:keys",
    "tx": "trolly.wallet.cli.tx:tx",
    "query": "trolly.wallet.cli.query:query",
    "task": "trolly.wallet.cli.task:task",
    "worker": "trolly.wallet.cli.worker:worker",
    "data": "trolly.compute.requester.cli:data",
    "model": "trolly.compute.requester.model_cli:model",
}
"""name -> "module:attribute" of a click group; the market engineer adds `task` and `worker` here."""


class LazyGroup(WalletGroup):
    """A group whose subcommands are imported from COMMAND_GROUPS on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_GROUPS) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        target = COMMAND_GROUPS.get(name)
        if target is None:
            return None
        return load_target(target)


EXIT_CODES_HELP = """
\b
Exit codes: 0 success; 1 other error; 2 usage error; 3 node unreachable;
4 wrong password; 5 unknown key name; 6 invalid address; 7 invalid amount;
8 insufficient funds; 9 transaction rejected; 10 timeout waiting for inclusion;
11 proof verification failed; 12 error answer from the node.
"""


@click.group(cls=LazyGroup, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="trolly", prog_name="trolly-wallet")
def cli() -> None:
    """Keys, transfers, staking and queries for a Trolly chain.

    Talks only CometBFT JSON-RPC (default http://127.0.0.1:26657, or $TROLLY_NODE), so it works against
    `trolly-node dev` and a real CometBFT node alike. Keys live in --home (else $TROLLY_WALLET_HOME, else
    ~/.trolly-wallet).
    """


def main() -> None:
    cli(prog_name="trolly-wallet")
