"""The `trolly-verifier` console script: pins a replayable instruction set before torch loads, then runs `cli`.

`trolly-verifier relay` goes straight to its command instead: a blob relay replays nothing, so it needs neither
the pin nor torch (what `cli` imports would cost it hundreds of megabytes and seconds at every start)."""

import sys

from trolly.compute.instruction_sets import run_pinned


def main() -> None:
    if sys.argv[1:2] == ["relay"]:
        from .relay_cli import relay

        relay(sys.argv[2:], prog_name="trolly-verifier relay")
        return
    run_pinned("trolly.verifier.cli")
