"""Browser worker speed: samples/s of the wasm32 kernel in Chromium, of its JavaScript fallback, and of the
torch worker, on the same task and machine, in one run.

    python -m benchmarks.browser_worker [--quick] [--hidden 1024 1024] [--steps N] [--repeats N]

The task is the protocol's example (the digits MLP 64-1024-1024-10, batch 32, AdamW) allowing `wasm32`. One
segment of it, from the task's initial weights, is trained by:

- **wasm_chromium**: `compute/wasm/kernel.wasm` in a Web Worker of a page that Debian's Chromium (driven by
  Playwright) loads from a small server on 127.0.0.1, as the browser worker's page trains;
- **js_chromium**: the JavaScript fallback (`compute/wasm/kernel.mjs`) in the same Web Worker;
- **wasm_node**: the .wasm under Node.js;
- **wasm_wasmtime**: the .wasm under wasmtime in Python, as a verifier replays a `wasm32` segment;
- **torch**: the torch worker's trainer (`compute/training.py`'s `Trainer`, one thread as the spec's profile sets,
  subnormals flushed as a round runs) on the same model, batch size and number of steps (its batches are
  torch's, not the kernel's: a `wasm32` round is the kernel's own).

Each kernel's warm-up steps come first and are not timed; then its timed steps. The runs take turns, `repeats`
times, so that other work on the machine weighs on them alike; each one's figure is its fastest turn (every
turn's seconds are reported too). Every kernel run must end in the same checkpoint hash (the .wasm and the
fallback in Chromium, Node.js and wasmtime): the benchmark fails otherwise.

Last line, JSON: `samples_per_s` per kernel, `ratio_to_torch` per kernel (its samples/s over torch's), the
task's shape, each kernel's `hashes` and `hashes_match`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from trolly.compute.checkpoints import TrainingState, checkpoint_hash
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.determinism import flushing_subnormals
from trolly.compute.spec import TaskSpec, example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights
from trolly.compute.wasm.profile import KERNEL_WASM, PROFILE_ID, kernel_sha256
from trolly.compute.wasm.segment import WasmTrainer, ieee_subnormals

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNNER = ROOT / "benchmarks" / "_browser_worker_run.mjs"
CHROMIUM = pathlib.Path("/usr/bin/chromium")
PAGE = b"<!doctype html><title>trolly browser worker benchmark</title><p>training in a Web Worker</p>"
SERVED = {"/compute/wasm/": ROOT / "compute" / "wasm", "/benchmarks/": ROOT / "benchmarks"}
TYPES = {".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json",
         ".bin": "application/octet-stream"}
WORKER_INDEX, ROUND_INDEX = 0, 0
KERNEL_RUNS = ("wasm_chromium", "js_chromium", "wasm_node", "wasm_wasmtime")
"""Every run of the kernel (the .wasm or its JavaScript twin): all must end at the same hash."""


@dataclasses.dataclass(frozen=True)
class Segment:
    """The timed segment: its task, training data and start state, steps [0, warmup) untimed then `steps`."""

    spec: TaskSpec
    dataset: object
    start: TrainingState
    warmup: int
    steps: int

    @property
    def end_step(self) -> int:
        return self.warmup + self.steps


def task_spec(manifest_hash: str, hidden: list[int], batch_size: int, steps: int) -> TaskSpec:
    """The protocol's example spec with `hidden` and `batch_size`, allowing the `wasm32` kernel."""
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": hidden}},
                            determinism={"threads": 1, "kernels": ["torch", "wasm32"]})
    document["training"].update(batch_size=batch_size, inner_steps=max(steps, 1))
    return spec_from_dict(document)


def write_segment(segment: Segment, trainer: WasmTrainer, folder: pathlib.Path) -> None:
    """The files `_browser_worker_run.mjs` loads: the segment's description and its arrays as raw bytes."""
    trainer.load(segment.start)
    weights, exp_avg, exp_avg_sq, adam_step = trainer.kernel.state()
    training, inner = segment.spec.training, segment.spec.training.inner_optimizer
    about = {"sizes": list(trainer.sizes), "batchSize": training.batch_size, "startStep": segment.start.step,
             "adamStep": adam_step, "workerIndex": WORKER_INDEX, "roundIndex": ROUND_INDEX,
             "warmupSteps": segment.warmup, "steps": segment.steps,
             "training": {"seed": str(training.seed), "rounds": training.rounds, "innerSteps": training.inner_steps,
                          "lr": inner.lr, "beta1": inner.beta1, "beta2": inner.beta2, "eps": inner.eps,
                          "weightDecay": inner.weight_decay,
                          "schedule": {"name": inner.schedule.name, "warmupSteps": inner.schedule.warmup_steps,
                                       "finalLr": inner.schedule.final_lr}}}
    (folder / "segment.json").write_text(json.dumps(about))
    arrays = {"inputs": segment.dataset.train_inputs.numpy().astype("<f4"),
              "targets": segment.dataset.train_targets.numpy().astype("<u4"),
              "weights": weights, "expAvg": exp_avg, "expAvgSq": exp_avg_sq}
    for name, array in arrays.items():
        (folder / f"{name}.bin").write_bytes(np.ascontiguousarray(array).tobytes())


def time_torch(trainer: Trainer, segment: Segment) -> dict:
    """The torch worker's steps on the segment: seconds of the timed steps (its hash is not comparable)."""
    trainer.load(segment.start)
    with flushing_subnormals():
        while trainer.step < segment.warmup:
            trainer.train_step(WORKER_INDEX, ROUND_INDEX)
        began = time.perf_counter()
        while trainer.step < segment.end_step:
            trainer.train_step(WORKER_INDEX, ROUND_INDEX)
        seconds = time.perf_counter() - began
    return {"seconds": seconds}


def time_wasmtime(trainer: WasmTrainer, segment: Segment) -> dict:
    """The .wasm under wasmtime, as a verifier replays: seconds of the timed steps and the end state's hash."""
    trainer.load(segment.start)
    with ieee_subnormals():
        trainer.train_to(WORKER_INDEX, ROUND_INDEX, segment.warmup)
        began = time.perf_counter()
        trainer.train_to(WORKER_INDEX, ROUND_INDEX, segment.end_step)
        seconds = time.perf_counter() - began
    return {"seconds": seconds, "hash": checkpoint_hash(trainer.snapshot()).hex()}


def time_node(node: str, folder: pathlib.Path, kind: str) -> dict:
    """The segment under Node.js (`kind` wasm or js)."""
    done = subprocess.run([node, str(RUNNER), str(folder), kind], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"node failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


class SegmentServer(http.server.BaseHTTPRequestHandler):
    """The page, the kernel's modules and .wasm, the runner module and the segment's files; nothing else."""

    segment_folder: pathlib.Path

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?")[0]
        if path == "/":
            self._send(PAGE, "text/html")
            return
        folders = {**SERVED, "/segment/": self.segment_folder}
        for prefix, folder in folders.items():
            name = path.removeprefix(prefix)
            if path.startswith(prefix) and "/" not in name and (folder / name).is_file():
                self._send((folder / name).read_bytes(), TYPES.get((folder / name).suffix, "text/plain"))
                return
        self.send_error(404)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_arguments) -> None:
        pass


@contextlib.contextmanager
def serving(folder: pathlib.Path) -> Iterator[str]:
    """A server on 127.0.0.1 (a free port) for the page and the segment in `folder`; yields its origin."""
    handler = type("Handler", (SegmentServer,), {"segment_folder": folder})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


TIME_IN_WORKER = """async (kind) => {
    window.benchmarkWorker ??= new Worker('/benchmarks/_browser_worker_run.mjs', { type: 'module' });
    return await new Promise((resolve) => {
        window.benchmarkWorker.onmessage = ({ data }) => resolve(data);
        window.benchmarkWorker.onerror = (event) => resolve({ error: event.message || 'the worker failed' });
        window.benchmarkWorker.postMessage({ kind });
    });
}"""


@contextlib.contextmanager
def chromium_page(origin: str) -> Iterator[tuple[Callable[[str], dict], str]]:
    """Debian's Chromium on the benchmark's page; yields a function timing the segment in its Web Worker
    (`kind` wasm or js) and the browser's version."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise SystemExit(f"Debian's chromium is not at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{origin}/")

            def run(kind: str) -> dict:
                result = page.evaluate(TIME_IN_WORKER, kind)
                if result.get("error") or errors:
                    raise RuntimeError(f"the page's worker failed: {result.get('error') or errors}")
                return result

            yield run, browser.version
        finally:
            browser.close()


def parse_options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and turns (a minute or two)")
    parser.add_argument("--hidden", type=int, nargs="+", default=None, help="hidden sizes (the example spec's)")
    parser.add_argument("--batch-size", type=int, default=None, help="the example spec's unless given")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per turn")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps before them")
    parser.add_argument("--repeats", type=int, default=None, help="turns of every run")
    options = parser.parse_args(argv)
    options.steps = options.steps or (10 if options.quick else 30)
    options.warmup = options.warmup if options.warmup is not None else (2 if options.quick else 3)
    options.repeats = options.repeats or (3 if options.quick else 5)
    return options


def make_segment(options: argparse.Namespace) -> Segment:
    digits = dataset_from_blobs(build_dataset("digits"))
    example = example_spec(digits.manifest_hash)
    hidden = options.hidden or example["model"]["config"]["hidden"]
    spec = task_spec(digits.manifest_hash, hidden, options.batch_size or example["training"]["batch_size"],
                     options.warmup + options.steps)
    start = TrainingState.fresh(initial_weights(spec, digits.shape))
    return Segment(spec, digits, start, options.warmup, options.steps)


def run_turns(segment: Segment, runs: dict[str, Callable[[], dict]], repeats: int) -> dict[str, list[dict]]:
    """Every run `repeats` times, taking turns; each turn's results by run."""
    turns: dict[str, list[dict]] = {name: [] for name in runs}
    for turn in range(repeats):
        for name, run in runs.items():
            turns[name].append(run())
            print(f"turn {turn + 1}/{repeats} {name}: {turns[name][-1]['seconds']:.3f} s for {segment.steps} steps",
                  file=sys.stderr)
    return turns


def rate(samples: int, seconds: float) -> float | None:
    """Samples per second, or None when the run was too short for its clock (a page's clock is coarse)."""
    return samples / seconds if seconds > 0 else None


def ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 4) if value is not None and base else None


def summarize(segment: Segment, turns: dict[str, list[dict]], task: dict, versions: dict) -> dict:
    samples = segment.steps * segment.spec.training.batch_size
    per_second = {name: rate(samples, min(t["seconds"] for t in results)) for name, results in turns.items()}
    hashes = {name: sorted({t["hash"] for t in turns[name]}) for name in KERNEL_RUNS if name in turns}
    distinct = {h for found in hashes.values() for h in found}
    torch_rate = per_second["torch"]
    return {
        "benchmark": "browser_worker",
        "wasm_chromium_samples_per_s": per_second["wasm_chromium"] and round(per_second["wasm_chromium"], 1),
        "js_chromium_samples_per_s": per_second["js_chromium"] and round(per_second["js_chromium"], 1),
        "torch_samples_per_s": torch_rate and round(torch_rate, 1),
        "wasm_ratio_to_torch": ratio(per_second["wasm_chromium"], torch_rate),
        "js_ratio_to_torch": ratio(per_second["js_chromium"], torch_rate),
        "hashes_match": len(distinct) == 1,
        "samples_per_s": {name: value and round(value, 1) for name, value in per_second.items()},
        "ratio_to_torch": {name: ratio(value, torch_rate) for name, value in per_second.items()},
        "seconds": {name: [round(t["seconds"], 4) for t in results] for name, results in turns.items()},
        "hashes": {name: found[0] if len(found) == 1 else found for name, found in hashes.items()},
        "task": task,
        "kernel": {"profile": PROFILE_ID, "sha256": kernel_sha256()},
        "versions": versions,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv)
    began = time.perf_counter()
    segment = make_segment(options)
    torch_trainer = Trainer(segment.spec, segment.dataset)
    wasm_trainer = WasmTrainer(segment.spec, segment.dataset, KERNEL_WASM.read_bytes())
    node = shutil.which("node")
    task = {"model": "mlp " + "-".join(str(size) for size in wasm_trainer.sizes),
            "parameters": wasm_trainer.kernel.params, "batch_size": segment.spec.training.batch_size,
            "timed_steps": segment.steps, "warmup_steps": segment.warmup, "repeats": options.repeats,
            "train_samples": len(segment.dataset.train_targets), "threads": 1}
    with tempfile.TemporaryDirectory(prefix="trolly-browser-worker-") as directory:
        folder = pathlib.Path(directory)
        write_segment(segment, wasm_trainer, folder)
        with serving(folder) as origin, chromium_page(origin) as (in_chromium, chromium_version):
            runs = {"wasm_chromium": functools.partial(in_chromium, "wasm"),
                    "js_chromium": functools.partial(in_chromium, "js"),
                    "wasm_wasmtime": functools.partial(time_wasmtime, wasm_trainer, segment),
                    "torch": functools.partial(time_torch, torch_trainer, segment)}
            if node:
                runs["wasm_node"] = functools.partial(time_node, node, folder, "wasm")
            turns = run_turns(segment, runs, options.repeats)
    versions = {"chromium": chromium_version, "node": node and subprocess.run(
        [node, "--version"], capture_output=True, text=True).stdout.strip()}
    result = summarize(segment, turns, task, versions)
    result["wall_seconds"] = round(time.perf_counter() - began, 1)
    print(json.dumps(result))
    if not result["hashes_match"]:
        print("error: the kernels ended at different hashes", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
