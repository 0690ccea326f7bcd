"""The `trolly-localnet` console script: pins a replayable instruction set before torch loads (the demo trains
in process, and every validator, worker and verifier it starts inherits the pin), then runs `cli`."""

from trolly.compute.instruction_sets import run_pinned


def main() -> None:
    run_pinned("trolly.localnet.cli")
