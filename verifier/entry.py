"""The `trolly-verifier` console script: pins a replayable instruction set before torch loads, then runs `cli`."""

from trolly.compute.instruction_sets import run_pinned


def main() -> None:
    run_pinned("trolly.verifier.cli")
