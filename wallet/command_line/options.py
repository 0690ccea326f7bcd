"""Options shared by every command, and the per-command settings they build.

Decorators (`keyring_options`, `node_options`, `output_option`) add the same flags everywhere with the same
defaults and environment variables; a command calls `settings()` to get a `CommandSettings` that hands out
the keyring, the password source and the node client, each built once per command (so a password is asked
at most once, and the client is closed when the command ends).
"""

from __future__ import annotations

import os
import pathlib
import sys
from dataclasses import dataclass, field

import click

from ..keyring import BACKENDS, Keyring
from ..nonces import NonceCache
from ..passwords import PasswordSource
from ..rpc import DEFAULT_NODE

HOME_ENVIRONMENT_VARIABLE = "TROLLY_WALLET_HOME"
NODE_ENVIRONMENT_VARIABLE = "TROLLY_NODE"
BACKEND_ENVIRONMENT_VARIABLE = "TROLLY_KEYRING_BACKEND"
PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE = "TROLLY_ALLOW_PRIVATE_ADDRESSES"
"""Set (to 1), `task fetch` and `task eval` fetch from private and loopback addresses too, as on a localnet."""
CONSOLE_TOKEN_ENVIRONMENT_VARIABLE = "TROLLY_CONSOLE_TOKEN"
"""`trolly-console`'s access token when it is not to be a new one (a localnet keeps its console's so): here
beside the other variables, as the localnet may not import the console."""
DEFAULT_HOME = "~/.trolly-wallet"
_META_KEY = "trolly.wallet.options"


def _store(name: str):
    def callback(ctx: click.Context, param: click.Parameter, value):
        ctx.meta.setdefault(_META_KEY, {})[name] = value
        return value

    return callback


def keyring_options(function):
    """--home, --keyring-backend, --password-file."""
    function = click.option(
        "--password-file",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_store("password_file"),
        help="Read the keyring password from the first line of this file (else $TROLLY_WALLET_PASSWORD, else a prompt).",
    )(function)
    function = click.option(
        "--keyring-backend",
        type=click.Choice(BACKENDS),
        envvar=BACKEND_ENVIRONMENT_VARIABLE,
        default="file",
        show_default=True,
        expose_value=False,
        callback=_store("keyring_backend"),
        help=f"file: encrypted with your password (argon2id); test: UNENCRYPTED, for localnets only "
        f"(env ${BACKEND_ENVIRONMENT_VARIABLE}).",
    )(function)
    function = click.option(
        "--home",
        type=click.Path(file_okay=False),
        envvar=HOME_ENVIRONMENT_VARIABLE,
        default=DEFAULT_HOME,
        show_default=True,
        expose_value=False,
        callback=_store("home"),
        help=f"Wallet home directory (env ${HOME_ENVIRONMENT_VARIABLE}).",
    )(function)
    return function


def node_options(function):
    """--node, --rpc-timeout."""
    function = click.option(
        "--rpc-timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        expose_value=False,
        callback=_store("rpc_timeout"),
        help="Seconds to wait for each answer from the node.",
    )(function)
    function = click.option(
        "--node",
        envvar=NODE_ENVIRONMENT_VARIABLE,
        default=DEFAULT_NODE,
        show_default=True,
        expose_value=False,
        callback=_store("node"),
        help=f"CometBFT JSON-RPC address of the node (env ${NODE_ENVIRONMENT_VARIABLE}).",
    )(function)
    return function


def output_option(function):
    """--output text|json."""
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        expose_value=False,
        callback=_store("output"),
        help="text: tables for people; json: stable keys for scripts.",
    )(function)


def prompt_password(text: str, confirm: bool) -> str:
    return click.prompt(text, hide_input=True, confirmation_prompt=confirm, err=True)


def read_secret_line(text: str) -> str:
    """A secret typed at a hidden prompt, or the next line of stdin when stdin is not a terminal."""
    if sys.stdin.isatty():
        return click.prompt(text, hide_input=True, err=True)
    click.echo(f"{text}: ", err=True, nl=False)
    line = sys.stdin.readline()
    click.echo("", err=True)
    return line.rstrip("\r\n")


@dataclass
class CommandSettings:
    home: pathlib.Path
    keyring_backend: str
    password_file: str | None
    node: str
    rpc_timeout: float
    output: str
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def passwords(self) -> PasswordSource:
        if "passwords" not in self._cache:
            self._cache["passwords"] = PasswordSource(self.password_file, os.environ, prompt_password)
        return self._cache["passwords"]

    def keyring(self, backend: str | None = None) -> Keyring:
        backend = backend or self.keyring_backend
        if ("keyring", backend) not in self._cache:
            self._cache[("keyring", backend)] = Keyring(self.home, backend, self.passwords())
        return self._cache[("keyring", backend)]

    def nonce_cache(self) -> NonceCache:
        return NonceCache(self.home)

    def client(self):
        """The node client, closed when the command ends (imported here: `keys` never needs aiohttp)."""
        if "client" not in self._cache:
            from ..rpc import RpcClient

            client = RpcClient(self.node, self.rpc_timeout)
            click.get_current_context().call_on_close(client.close)
            self._cache["client"] = client
        return self._cache["client"]


def settings() -> CommandSettings:
    ctx = click.get_current_context()
    if "settings" not in ctx.meta:
        values = ctx.meta.get(_META_KEY, {})
        ctx.meta["settings"] = CommandSettings(
            home=pathlib.Path(values.get("home") or DEFAULT_HOME).expanduser(),
            keyring_backend=values.get("keyring_backend") or "file",
            password_file=values.get("password_file"),
            node=values.get("node") or DEFAULT_NODE,
            rpc_timeout=values.get("rpc_timeout") or 10.0,
            output=values.get("output") or "text",
        )
    return ctx.meta["settings"]
