"""How the CLI fails: one line on stderr, `Error: <reason>`, and the exit code of the error's class.

Every wallet failure is a `WalletError` with an `exit_code` (see `trolly.wallet.errors`); a `ChainError`
that escapes the library (an encoding rule refused by chain code) is reported the same way. Anything else is
a bug and keeps its traceback.
"""

from __future__ import annotations

import click

from trolly.chain.errors import ChainError

from ..errors import WalletError


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class WalletGroup(click.Group):
    """A click group that turns expected failures into `Error: ...` and an exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except WalletError as error:
            click.echo(f"Error: {one_line(error)}", err=True)
            ctx.exit(error.exit_code)
        except ChainError as error:
            click.echo(f"Error: {one_line(error)}", err=True)
            ctx.exit(1)
