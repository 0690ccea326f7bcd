"""`trolly-console`'s entry point: the instruction set pinned first, as every entry point that trains pins it.

The console loads no torch when it starts, but the pages that train or measure load it in this process when
they are first used (the task page's chart job evaluates rounds, the New task page builds specs), so it pins
before anything can load torch (`compute.instruction_sets.run_pinned`)."""

from trolly.compute.instruction_sets import run_pinned


def main() -> None:
    run_pinned("trolly.console.cli")
