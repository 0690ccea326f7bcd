"""TEST SWITCH, never for a real validator: an app that dies between FinalizeBlock and Commit of one height.

`trolly-node start` reads the environment variable `TROLLY_TEST_EXIT_BEFORE_COMMIT_HEIGHT` once, at start-up;
when it names a height, the app executes that block's FinalizeBlock as usual (its app hash is sent back to
CometBFT), then exits the process without a word when the Commit for that height arrives, before anything of
the block is written. It exists so that a test can show CometBFT's handshake at the next start replaying the
block to the app (FinalizeBlock is a pure function of the last committed state and the block) and the node
rejoining the network with the same app hash. A SIGKILL from outside cannot aim at that moment reliably.
"""

from __future__ import annotations

import logging
import os
import sys

from .application import TrollyApplication
from .errors import AbciAppError

log = logging.getLogger("trolly.node")

ENVIRONMENT_VARIABLE = "TROLLY_TEST_EXIT_BEFORE_COMMIT_HEIGHT"
EXIT_CODE = 75
"""The exit status of the switch's deliberate crash, so that a test can tell it from any other exit."""


def exit_before_commit_height(environ: dict[str, str]) -> int | None:
    """The height the switch names in `environ`, or None when it is unset; a bad value is an error."""
    text = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise AbciAppError(f"{ENVIRONMENT_VARIABLE} must be a block height (a positive integer), not {text!r}")
    return int(text)


class ExitBeforeCommit(TrollyApplication):
    """The application, except that it exits the process at the Commit of block `height` (before writing)."""

    def __init__(self, store, chain_id_hint: str | None, height: int, **helpers) -> None:
        super().__init__(store, chain_id_hint, **helpers)
        self.exit_height = height
        self._finalized_height = 0

    def finalize_block(self, request):
        response = super().finalize_block(request)
        self._finalized_height = request.height
        return response

    def commit(self, request):
        if self._finalized_height == self.exit_height:
            log.warning("TEST SWITCH %s: exiting after FinalizeBlock of height %d, before its Commit",
                        ENVIRONMENT_VARIABLE, self.exit_height)
            for handler in logging.getLogger().handlers:
                handler.flush()
            sys.stderr.flush()
            os._exit(EXIT_CODE)  # no cleanup: a crash, as far as the store and CometBFT can tell
        return super().commit(request)
