"""`trolly-wallet` run in process (click's CliRunner, the console script's own code) with a hermetic
environment, and what the wallet tests read of its answers."""

from __future__ import annotations

import json

from click.testing import CliRunner

from trolly.wallet.cli import cli

WALLET_VARIABLES = ("TROLLY_WALLET_PASSWORD", "TROLLY_NODE", "TROLLY_WALLET_HOME", "TROLLY_KEYRING_BACKEND")
"""What the caller's shell could set for the wallet: a test's run must not inherit any of it."""


def hermetic(monkeypatch) -> None:
    """None of the wallet's environment variables from the caller's shell leaks into the runs."""
    for name in WALLET_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def invoke_wallet(args, env: dict[str, str], input: str | None = None):
    """`trolly-wallet ARGS` with exactly `env` added to the environment; the click result."""
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env, catch_exceptions=False)


def ok_json(result):
    """What a command that succeeded printed with `-o json`."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def fails_with(result, exit_code, text):
    """A failure is one line on stderr, `Error: ...`, with the documented exit code."""
    assert result.exit_code == exit_code, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and text in lines[-1], result.stderr
