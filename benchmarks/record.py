"""Run a benchmark, keep its JSON line, and regenerate the figures table of `docs/performance.md` from the kept lines.

    python -m benchmarks.record NAME [--quick] [-- ARGS...]    run `python -m benchmarks.NAME`, keep its last line
    python -m benchmarks.record --table                         only regenerate the table from the kept lines

Every benchmark prints one JSON object as its last line. This runs one as a user would (its output passes
through unchanged), parses that line, and keeps it in `docs/figures/NAME.json` (`NAME.quick.json` for a `--quick`
run) with when, on which commit and with what load the machine had. The table between the markers
`<!-- figures:begin -->` and `<!-- figures:end -->` of `docs/performance.md` is then rewritten from every kept
line: one row per benchmark and mode with its headline figures, so that the document shows what the benchmarks
printed, never a hand-copied number. A benchmark that fails (non-zero exit, or no JSON object last) keeps
nothing and leaves the document as it was.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from trolly.wallet.files import write_atomically

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
DOCUMENT = ROOT / "docs" / "performance.md"
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"

HEADLINES: dict[str, tuple[str, ...]] = {
    "network_throughput": ("tx_per_s_trolly", "tx_per_s_kvstore", "tx_per_s_solo", "ratio_to_kvstore",
                           "p99_latency_s", "tx_per_s_noop", "tx_per_s_sigcheck"),
    "verification": ("replay_step_cost_ratio", "verifier_compute_fraction", "false_positive_rate",
                     "honest_segments", "task_detection_at_f_0_1"),
    "fuzz_chain": ("txs", "crashes", "invariant_failures", "nondeterministic", "unknown_codes", "hostile_tx_per_s",
                   "honest_tx_per_s", "transfer_check_tx_ms", "worst_check_tx_ms", "worst_block_seconds"),
    "localnet_demo": ("seconds", "command_wall_seconds", "engine", "validators", "baseline_cold_start_seconds"),
    "app_tx_cpu": ("per_tx_us", "txs", "block_size", "gc"),
    "delegation": ("block_seconds_10", "block_seconds_10000", "ratio", "distribution_ratio"),
    "market_scale": ("tasks", "workers", "validators", "commits_block_cpu_seconds", "verdicts_block_cpu_seconds",
                     "reveals_block_cpu_seconds", "max_block_cpu_seconds", "state_bytes_per_round", "target_met"),
    "compression": ("bytes_ratio", "loss_gap_rel", "loss_gap_rel_vs_best_dense", "accuracy_ours", "accuracy_dense",
                    "ours_beats_powersgd_at_equal_or_fewer_bytes"),
    "soak": ("tasks_submitted", "tasks_completed", "cheaters_slashed", "honest_workers_slashed", "invariant_failures",
             "supply_drift", "app_hash_disagreements", "max_block_seconds", "disk_bytes_per_1000_blocks_pruned",
             "disk_bytes_per_1000_blocks_unpruned", "state_sync_join_seconds", "ok"),
    "quality": ("worst_gap", "worst_gap_at_least_target", "worst_regression_gap", "seconds"),
    "browser_worker": ("wasm_chromium_samples_per_s", "js_chromium_samples_per_s", "torch_samples_per_s",
                       "wasm_ratio_to_torch", "js_ratio_to_torch", "hashes_match"),
    "finetune": ("accuracy_ours", "accuracy_baseline", "accuracy_head", "accuracy_alone",
                 "ours_beats_baseline_and_head", "bytes_ratio", "parameters_total", "verifier_compute_fraction",
                 "seconds"),
}
"""The figures a benchmark's row shows, in order (an issue's targets name them). Any other benchmark's row shows
its first `MAX_COLUMNS` top-level numbers, strings and booleans."""
MAX_COLUMNS = 6


class RecordError(Exception):
    """A benchmark that could not be run or recorded; the message says which and why."""


@dataclass(frozen=True)
class Figures:
    """One kept JSON line: the benchmark, its mode, the line itself, and the circumstances of the run."""

    name: str
    quick: bool
    result: dict
    recorded: str
    commit: str
    load: float | None

    def path(self, directory: Path) -> Path:
        return directory / f"{self.name}{'.quick' if self.quick else ''}.json"

    def to_json(self) -> str:
        return json.dumps({"benchmark": self.name, "quick": self.quick, "recorded": self.recorded,
                           "commit": self.commit, "load_average_1m": self.load, "result": self.result},
                          indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_file(cls, path: Path) -> Figures:
        try:
            data = json.loads(path.read_text())
            return cls(name=str(data["benchmark"]), quick=bool(data["quick"]), result=dict(data["result"]),
                       recorded=str(data["recorded"]), commit=str(data["commit"]), load=data.get("load_average_1m"))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise RecordError(f"{path}: not a kept benchmark line ({error})") from error


def last_json_object(output: str) -> dict:
    """The JSON object on the last non-empty line of a benchmark's standard output."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        raise RecordError("the benchmark printed nothing on its standard output")
    try:
        value = json.loads(lines[-1])
    except ValueError as error:
        raise RecordError(f"the benchmark's last line is not JSON ({error}): {lines[-1][:200]!r}") from error
    if not isinstance(value, dict):
        raise RecordError(f"the benchmark's last line is JSON but not an object: {lines[-1][:200]!r}")
    return value


def headline(figures: Figures) -> list[tuple[str, object]]:
    """The (key, value) pairs a row shows."""
    result = figures.result
    keys = HEADLINES.get(figures.name)
    if keys is not None:
        return [(key, result[key]) for key in keys if key in result]
    scalars = [(key, value) for key, value in result.items() if isinstance(value, (int, float, str, bool))]
    return scalars[:MAX_COLUMNS]


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def render_table(kept: list[Figures]) -> str:
    """The markdown table of every kept line, one row per benchmark and mode, sorted by name then mode."""
    rows = ["| benchmark | mode | figures | recorded | commit | load (1 min) |", "|---|---|---|---|---|---|"]
    for figures in sorted(kept, key=lambda f: (f.name, f.quick)):
        shown = ", ".join(f"`{key}` {_cell(value)}" for key, value in headline(figures))
        load = "" if figures.load is None else f"{figures.load:.2f}"
        rows.append(f"| `{figures.name}` | {'quick' if figures.quick else 'full'} | {shown} | {figures.recorded} "
                    f"| `{figures.commit}` | {load} |")
    return "\n".join(rows)


def rewrite_section(document: str, table: str) -> str:
    """`document` with the text between its markers replaced by `table`; the markers must each appear once."""
    if document.count(BEGIN) != 1 or document.count(END) != 1 or document.index(BEGIN) > document.index(END):
        raise RecordError(f"the document must hold {BEGIN} then {END}, once each")
    head, rest = document.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def load_kept(directory: Path) -> list[Figures]:
    return [Figures.from_file(path) for path in sorted(directory.glob("*.json"))]


def write_text(path: Path, text: str) -> None:
    """Replace `path` by `text` so that a crash leaves the old file or the new one; readable by all (a document)."""
    write_atomically(path, text.encode(), mode=0o644)


def regenerate(directory: Path, document: Path) -> None:
    write_text(document, rewrite_section(document.read_text(), render_table(load_kept(directory))))


def current_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_benchmark(module: str, arguments: list[str]) -> dict:
    """Run `python -m module ARGS`, its standard error and output passing through; return its last JSON line."""
    command = [sys.executable, "-m", module, *arguments]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    output = []
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        output.append(line)
    if process.wait() != 0:
        raise RecordError(f"{' '.join(command[1:])} exited with code {process.returncode}; nothing kept")
    return last_json_object("".join(output))


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.record", description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after -- go to the benchmark.")
    parser.add_argument("name", nargs="?", help="a benchmark's module name under benchmarks/ (e.g. verification)")
    parser.add_argument("--quick", action="store_true", help="run it with --quick and keep it as the quick figures")
    parser.add_argument("--table", action="store_true", help="only regenerate the table from the kept lines")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="where kept lines live (default docs/figures)")
    parser.add_argument("--document", type=Path, default=DOCUMENT, help="the document whose table is rewritten")
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    arguments = parser.parse_args(argv[:len(argv) - len(rest) - (1 if "--" in argv else 0)])
    arguments.rest = rest
    if arguments.table == bool(arguments.name):
        parser.error("give a benchmark's name, or --table alone")
    if arguments.name and not arguments.name.isidentifier():
        parser.error(f"{arguments.name!r} is not a benchmark module name")
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    try:
        if arguments.name:
            module = f"benchmarks.{arguments.name}"
            result = run_benchmark(module, (["--quick"] if arguments.quick else []) + arguments.rest)
            figures = Figures(name=arguments.name, quick=arguments.quick, result=result,
                              recorded=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                              commit=current_commit(), load=os.getloadavg()[0])
            write_text(figures.path(arguments.figures), figures.to_json())
        regenerate(arguments.figures, arguments.document)
    except RecordError as error:
        print(f"benchmarks.record: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
