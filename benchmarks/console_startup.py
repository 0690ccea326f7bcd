"""How long `trolly-console` takes to start and how much memory it holds then: a console that starts light.

Each start runs `trolly-console --port 0 --home <empty> --node http://127.0.0.1:1` (no node is needed to start),
times it until it prints its address, and reads its resident memory (`VmRSS` in `/proc/<pid>/status`) at that
moment; then stops it. The console loads no torch when it starts (`tests/console/test_console_light.py`), so its figures
are those of its web server, the wallet and the chain's codecs; a console that imported torch at start paid
the import's seconds and memory on every start.

    python -m benchmarks.console_startup [--starts N] [--script PATH]

`--script`: the console script to start (default: the `trolly-console` beside this interpreter). Prints one JSON
object last.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time


def start_once(script: str) -> tuple[float, int]:
    """Seconds until the console printed its address, and its resident memory then (MiB)."""
    with tempfile.TemporaryDirectory() as home:
        began = time.perf_counter()
        process = subprocess.Popen([script, "--port", "0", "--home", home, "--node", "http://127.0.0.1:1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            line = process.stdout.readline()
            seconds = time.perf_counter() - began
            if "Trolly console:" not in line:
                raise SystemExit(f"the console did not start: {line}{process.stdout.read()}")
            status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
            rss_kib = next(int(row.split()[1]) for row in status.splitlines() if row.startswith("VmRSS"))
        finally:
            process.terminate()
            process.wait()
    return seconds, rss_kib // 1024


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--script", default=str(pathlib.Path(sys.executable).parent / "trolly-console"))
    options = parser.parse_args(argv)
    starts = [start_once(options.script) for _ in range(options.starts)]
    result = {"start_seconds": [round(seconds, 2) for seconds, _ in starts],
              "rss_mib": [rss for _, rss in starts]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
