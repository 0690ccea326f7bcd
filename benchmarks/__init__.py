"""Benchmarks: `python -m benchmarks.<name> [--quick]`, each measuring its own baseline in the same run and
printing one JSON object as its last line. Speed targets are checked here, never by timed tests."""
