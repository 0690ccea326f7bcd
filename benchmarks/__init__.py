"""Benchmarks: `python -m benchmarks.<name> [--quick]`, each measuring its own baseline in the same run and
printing one JSON object as its last line. Speed targets are checked here, never by timed tests.

Importing the package pins a replayable instruction set (`trolly.compute.instruction_sets`) before any
benchmark imports torch, so that what a benchmark trains and commits is what a worker would, on any CPU."""

from trolly.compute.instruction_sets import pin_replayable_instruction_set

pin_replayable_instruction_set()
