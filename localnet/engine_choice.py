"""Which consensus engine a new localnet runs: CometBFT by default, the solo engine where it must.

Without `--engine`, a localnet runs `DEFAULT_VALIDATORS["cometbft"]` validators on CometBFT when a usable
`cometbft` (v0.38) is found, and otherwise says so in one line and runs the built-in solo engine with one
validator. An explicit `--engine cometbft`, or more than one validator, without a usable binary is an error
that says how to get one. `--engine solo` never looks for CometBFT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from trolly.abci_app.cometbft import CometbftBinary, CometbftError, find_cometbft

from .home_layout import DEFAULT_VALIDATORS, LocalnetError


@dataclass(frozen=True)
class EngineChoice:
    engine: str
    validators: int
    cometbft: CometbftBinary | None
    note: str = ""
    """One line to show the user when the choice differs from the default (the fallback to solo)."""


def choose_engine(engine: str | None, validators: int | None,
                  find: Callable[[], CometbftBinary] = find_cometbft) -> EngineChoice:
    if engine == "solo":
        return EngineChoice("solo", validators or DEFAULT_VALIDATORS["solo"], None)
    try:
        binary = find()
    except CometbftError as exc:
        if engine == "cometbft":
            raise LocalnetError(f"--engine cometbft: {exc}") from None
        if validators not in (None, 1):
            raise LocalnetError(f"{validators} validators run on CometBFT, and {exc}") from None
        return EngineChoice("solo", 1, None, f"{exc}; running the built-in solo engine (one validator) instead")
    return EngineChoice("cometbft", validators or DEFAULT_VALIDATORS["cometbft"], binary)
