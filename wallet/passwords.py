"""Where a keyring password comes from, asked at most once per command.

Sources, first match wins: a password file (`--password-file`, first line), the environment variable
`TROLLY_WALLET_PASSWORD`, then an interactive hidden prompt. Whatever the source, the answer is remembered for
the rest of the command, so a command that decrypts several keys never asks twice (a common complaint about
other wallets).
"""

from __future__ import annotations

import os
import pathlib
from typing import Callable, Mapping

from .errors import KeyringError

PASSWORD_ENVIRONMENT_VARIABLE = "TROLLY_WALLET_PASSWORD"

Prompt = Callable[[str, bool], str]
"""prompt(text, confirm) -> password; `confirm` asks twice and insists the two answers match."""


def read_password_file(path: str | os.PathLike) -> str:
    """The first line of a password file, without its line ending (the rest of the file is ignored)."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyringError(f"cannot read password file {str(path)!r}: {exc.strerror or exc}") from None
    lines = text.splitlines()
    return lines[0] if lines else ""


class PasswordSource:
    """Gives the keyring password on demand, from a file, the environment or a prompt; caches the answer."""

    def __init__(
        self,
        password_file: str | os.PathLike | None = None,
        environment: Mapping[str, str] | None = None,
        prompt: Prompt | None = None,
    ) -> None:
        self._password_file = password_file
        self._environment = os.environ if environment is None else environment
        self._prompt = prompt
        self._cached: str | None = None
        self.prompts_shown = 0

    @classmethod
    def fixed(cls, password: str) -> "PasswordSource":
        """A source that always answers `password` (for library callers and tests)."""
        source = cls(environment={})
        source._cached = password
        return source

    def get(self, text: str = "Keyring password", *, confirm: bool = False) -> str:
        if self._cached is not None:
            return self._cached
        if self._password_file is not None:
            password = read_password_file(self._password_file)
        elif self._environment.get(PASSWORD_ENVIRONMENT_VARIABLE):
            password = self._environment[PASSWORD_ENVIRONMENT_VARIABLE]
        elif self._prompt is not None:
            self.prompts_shown += 1
            password = self._prompt(text, confirm)
        else:
            raise KeyringError(
                f"a password is needed: pass --password-file or set {PASSWORD_ENVIRONMENT_VARIABLE}"
            )
        self._cached = password
        return password
