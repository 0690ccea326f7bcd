"""Verification quality and cost: honest workers on other hardware profiles, every cheat class, the compute.

    python -m benchmarks.verification [--quick] [--cheat-module FILE]

1. Honest matrix. Child processes play honest workers under each determinism profile available here
   (threads 1 and 2; instruction sets default, avx2 and the one this CPU's workers train under, each with
   every library pinned as `trolly.compute.instruction_sets` pins a worker), each training several workers
   for several rounds (the rounds chained by the real outer step over codec-encoded updates) and writing
   blobs and listings to a blob-store directory. This process, the verifier, checks every segment of every
   round through `verify_segment` as the service does: the committed profile replayed exactly (thread count
   set, other instruction sets in child processes), and the round's update checked against its checkpoints
   and the residuals the children commit round after round. Any non-PASS is a false positive. Each segment
   is also judged by a verifier measuring the tolerance (`Replayer(tolerance_fallback=True)`, as one whose
   CPU lacks the worker's instruction set would judge if the protocol let it: it refuses instead): that
   gives the honest side of the tolerance calibration and its own false-positive count.
   It also recomputes each round's aggregate from the encoded updates and compares it with the start
   weights of the next round (and with stale weights, which it must reject).
2. Cheat matrix. For every registered cheat (the one registry, `compute/cheats/`, whose cheats a worker
   started with `--cheat NAME` plays too, under the same names; plus `--cheat-module` files) and model,
   cheating rounds are built with a random third of the segments faked (whole-round cheats such as
   `forged_update`, whose segments are honest and whose update is not, fake all of them); every faked
   segment is verified by the real verifier
   (`detection`) and by the tolerance-measuring one (`tolerance_fallback.detection`, and the cheat side of
   the calibration).
3. Cost. Seconds per trained step (honest `run_round`, checkpoints hashed, after a warm-up round) and seconds
   per verified segment (fetch and hash-check both checkpoints, Merkle check, decode, replay, compare, and
   the round's one update check; nothing kept from another segment but the replayer's model and optimizer,
   built in a warm-up verification as a verifier builds them once per task; two segments in flight over one
   replay thread, as in the service) and per update check (checkpoints 0 and n fetched and checked, the
   update and residual recomputed, nothing cached), the three phases taking turns 3 times (6 in a full run),
   in wall-clock and CPU time, on the protocol's example model (MLP 64-1024-1024-10,
   batch 32), scaled to a reference task: 20 rounds of 500 inner steps (DiLoCo's H), k = 5, 3 segments
   sampled per worker-round, i.e. 60 segments and 20 update checks per worker per task.

4. The `wasm32` profile (the browser worker's kernel, docs/browser-worker.md): the cheat matrix again on the MLP
   models with rounds trained and committed by the kernel (`compute.wasm.trainer`), judged bitwise by the same
   verifier, and the cost measurement on the reference MLP with the kernel training and replaying; its verifier
   cost fraction is reported beside the CPU profile's (`wasm32` in the JSON line).

Last line, JSON: detection (per class), false_positive_rate, honest_segments, task_detection_at_f_0_1,
verifier_compute_fraction, replay_step_cost_ratio (seconds per verified segment over seconds per k trained
steps), tolerance_fallback, and calibration numbers (largest honest error, smallest cheat
error, under the tolerance) that `verifier/tolerance.py` documents. Targets (issue 6): detection >= 0.999
for every class, 0 false positives over >= 200 honest segments, task detection >= 0.99 at f = 0.1,
compute <= 0.05 of training.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import math
import pathlib
import subprocess
import sys
import tempfile
import time

import torch

from trolly.chain.market.records import FINAL_REPORT_SEGMENT
from trolly.chain.market.spec import TORCH_KERNEL, WASM32_KERNEL
from trolly.compute.blobs.store import BlobStore
from trolly.compute.canonical import encode_tensors
from trolly.compute.checkpoints import decode_checkpoint, weights_hash
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.determinism import DeterminismProfile, child_environment, current_instruction_set
from trolly.compute.outer_step import GlobalState, WorkerUpdate, aggregate_round, outer_step
from trolly.compute.spec import LORA_TEXT_BASE, example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.compute.wasm.profile import PROFILE_ID as WASM32_PROFILE
from trolly.compute.wasm.trainer import trainer_for
from trolly.verifier import sampling
from trolly.verifier.aggregation import check_aggregation
from trolly.verifier.final_report import verify_final_report
from trolly.compute.cheats import CHEATS, CheatContext, choose_faked_segments, get_cheat, honest_round, load_cheat_module
from trolly.verifier.segment_check import PASSED, Replayer, SegmentClaim, check_round_update, verify_segment
from trolly.verifier.blob_cache import VerifiedBlobs
from trolly.verifier.update_check import UpdateChecks
from trolly.verifier.checkpoint_sources import DirectorySource, MemorySource
from trolly.verifier.tolerance import MOMENTS_THRESHOLD, TOLERANCE, WEIGHTS_THRESHOLD

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
REFERENCE_TASK = {"rounds": 20, "inner_steps": 500, "checkpoint_every": 5, "samples_per_worker_round": 3}
SERVICE_CONCURRENCY = 2  # the verifier service's default (`verifier/service.py` ServiceConfig.concurrency)
FRACTION_FAKED = 0.1
TARGET = 0.99


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    arch: str
    config: dict
    dataset: str
    checkpoint_every: int
    inner_steps: int = 50
    batch_size: int = 32
    base: dict | None = None  # a lora-text model's pinned base (`model.base`)


COST_MODEL = Model("reference-mlp", "mlp", {"hidden": [1024, 1024]}, "digits", REFERENCE_TASK["checkpoint_every"])
"""The model of the protocol's example spec (docs/protocol.md section 1), on which cost is measured: the tiny
models of the matrices are dominated by fixed per-segment costs (decoding and hashing two checkpoints), which
no real task is."""

LORA_BASE = LORA_TEXT_BASE
"""The pinned all-MiniLM-L6-v2 the LoRA model of the full run fine-tunes (`compute/models/lora_text.py`)."""

QUICK_MODELS = (Model("mlp-k5", "mlp", {"hidden": [32]}, "digits", 5),)
FULL_MODELS = (
    Model("mlp-k5", "mlp", {"hidden": [64, 64]}, "digits", 5),
    Model("mlp-k10", "mlp", {"hidden": [64, 64]}, "digits", 10),
    Model("cnn-k10", "cnn", {"channels": [4, 8], "hidden": 32}, "digits", 10),
    Model("transformer-k10", "transformer", {"layers": 1, "heads": 2, "width": 32}, "pycorpus", 10, 30, 8),
    Model("lora-k5", "lora-text", {"rank": 2, "alpha": 4}, "pydocs", 5, 10, 4, base=LORA_BASE),
)


def make_spec(model: Model, manifest_hash: str, threads: int = 1, kernels: tuple[str, ...] = (TORCH_KERNEL,)):
    document = example_spec(manifest_hash, model={"arch": model.arch, "config": model.config,
                                                  **({"base": model.base} if model.base else {})},
                            determinism={"threads": threads, "kernels": list(kernels)})
    document["dataset"]["name"] = model.dataset
    document["training"].update(inner_steps=model.inner_steps, checkpoint_every=model.checkpoint_every,
                                batch_size=model.batch_size)
    return spec_from_dict(document)


_DATASETS: dict[str, object] = {}


def dataset_for(name: str):
    if name not in _DATASETS:
        options = {"max_bytes": 200_000} if name == "pycorpus" else {}
        _DATASETS[name] = dataset_from_blobs(build_dataset(name, **options))
    return _DATASETS[name]


# ---- honest workers, in a child process per profile ---------------------------------------------------------


def honest_child(arguments: dict) -> None:
    """Train `workers` x `rounds` honest rounds per model and write blobs, listings and claims to `out`."""
    out = pathlib.Path(arguments["out"])
    profile = DeterminismProfile(threads=arguments["threads"])
    records = []
    for model_index, model in enumerate(Model(**m) for m in arguments["models"]):
        dataset = dataset_for(model.dataset)
        spec = make_spec(model, dataset.manifest_hash, threads=profile.threads)
        trainer = Trainer(spec, dataset)
        state = GlobalState.initial(initial_weights(spec, dataset.shape))
        feedback = {w: ErrorFeedback(get_codec(spec.codec)) for w in range(arguments["workers"])}
        residual_hashes = {w: "" for w in range(arguments["workers"])}
        for round_index in range(arguments["rounds"]):
            updates = []
            for worker in range(arguments["workers"]):
                store = BlobStore(out / model.name / f"worker-{worker}")
                result = run_round(trainer, state.weights, worker_index=worker, round_index=round_index,
                                   steps=spec.training.inner_steps, sink=lambda record, data, s=store: s.put(data))
                store.set_checkpoints(model_index, round_index, [h.hex() for h in result.checkpoint_hashes])
                encoded, sent = feedback[worker].encode(result.pseudo_gradient)
                store.put(encoded)
                previous_residual_hash = residual_hashes[worker]
                residual_hashes[worker] = store.put(encode_tensors(feedback[worker].residual))
                updates.append(WorkerUpdate(worker, result.samples_processed, sent))
                records.append({
                    "model": model_index, "round": round_index, "worker_index": worker, "steps": result.steps,
                    "samples_processed": result.samples_processed, "checkpoint_root": result.checkpoint_root.hex(),
                    "num_checkpoints": len(result.checkpoints), "start_weights_hash": result.start_weights_hash.hex(),
                    "update_hash": hashlib.sha256(encoded).hexdigest(), "profile": trainer.profile_id,
                    "residual_hash": residual_hashes[worker], "previous_residual_hash": previous_residual_hash,
                })
            state = outer_step(state, updates, spec.training.outer_optimizer)
    (out / "records.json").write_text(json.dumps(records))


def run_honest_children(models, profiles, workers: int, rounds: int, directory: pathlib.Path) -> list[tuple[dict, pathlib.Path]]:
    """Start one child per profile (two at a time), return (records, out dir) per profile."""
    jobs = []
    for threads, instruction_set in profiles:
        out = directory / f"threads{threads}-{instruction_set}"
        out.mkdir(parents=True)
        arguments = {"out": str(out), "threads": threads, "workers": workers, "rounds": rounds,
                     "models": [dataclasses.asdict(m) for m in models]}
        environment = child_environment(DeterminismProfile(threads=threads, instruction_set=instruction_set))
        command = [sys.executable, "-m", "benchmarks.verification", "--honest-child", json.dumps(arguments)]
        jobs.append((command, environment, out))
    results = []
    running: list[tuple[subprocess.Popen, pathlib.Path]] = []
    for command, environment, out in jobs:
        running.append((subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, cwd=REPOSITORY), out))
        if len(running) == 2:
            results.append(_finish_child(*running.pop(0)))
    for process, out in running:
        results.append(_finish_child(process, out))
    return results


def _finish_child(process: subprocess.Popen, out: pathlib.Path):
    _, error = process.communicate(timeout=3600)
    if process.returncode != 0:
        raise SystemExit(f"honest worker child failed ({out.name}):\n{error.decode()[-2000:]}")
    return json.loads((out / "records.json").read_text()), out


def verify_honest(models, children, exact: Replayer, tolerant: Replayer) -> dict:
    """Every segment of every honest round, by the real verifier (`exact`: the committed profile replayed
    exactly, other instruction sets in child processes) and by one that can only compare within the tolerance
    (`tolerant`, as a verifier whose CPU lacks the worker's instruction set would)."""
    tally = {"segments": 0, "false_positives": 0, "tolerance_segments": 0, "tolerance_false_positives": 0}
    per_profile: dict[str, dict] = {}
    failures = []
    aggregation = {"rounds_checked": 0, "matches": 0, "stale_start_rejected": 0, "initial_weights_differ": 0,
                   "final_reports_checked": 0, "final_reports_passed": 0}
    for records, out in children:
        for model_index, model in enumerate(models):
            dataset = dataset_for(model.dataset)
            spec = make_spec(model, dataset.manifest_hash)
            mine = [r for r in records if r["model"] == model_index]
            for record in mine:
                source = DirectorySource(out / model.name / f"worker-{record['worker_index']}")
                stats = per_profile.setdefault(f"{record['profile']} ({model.name})", {
                    "segments": 0, "exact_mode": "", "tolerance_max_weights_error": 0.0, "tolerance_max_moment_error": 0.0})
                for segment in range(record["num_checkpoints"] - 1):
                    claim = SegmentClaim(
                        task_id=model_index, round=record["round"], worker=f"worker-{record['worker_index']}",
                        worker_index=record["worker_index"], segment=segment,
                        checkpoint_root=bytes.fromhex(record["checkpoint_root"]), num_checkpoints=record["num_checkpoints"],
                        steps=record["steps"], samples_processed=record["samples_processed"],
                        start_weights_hash=bytes.fromhex(record["start_weights_hash"]),
                        determinism_profile=record["profile"], update_hash=bytes.fromhex(record["update_hash"]),
                        residual_hash=bytes.fromhex(record["residual_hash"]),
                        previous_residual_hash=bytes.fromhex(record["previous_residual_hash"]))
                    stats["segments"] += 1
                    report = asyncio.run(verify_segment(claim, spec, dataset, source, exact, spec_key=model.name))
                    tally["segments"] += 1
                    stats["exact_mode"] = report.comparison.mode if report.comparison else report.outcome
                    if report.outcome != PASSED:
                        tally["false_positives"] += 1
                        failures.append(report.to_json())
                    if report.comparison is not None and report.comparison.mode == TOLERANCE:
                        continue  # already a tolerance judgement (profile this CPU cannot run)
                    fallback = asyncio.run(verify_segment(claim, spec, dataset, source, tolerant, spec_key=model.name))
                    if fallback.comparison is None or fallback.comparison.mode != TOLERANCE:
                        continue  # the verifier's own profile: bitwise either way
                    tally["tolerance_segments"] += 1
                    stats["tolerance_max_weights_error"] = max(stats["tolerance_max_weights_error"], fallback.comparison.weights_error)
                    stats["tolerance_max_moment_error"] = max(stats["tolerance_max_moment_error"], fallback.comparison.moment_error)
                    if fallback.outcome != PASSED:
                        tally["tolerance_false_positives"] += 1
                        failures.append(fallback.to_json())
            _check_child_aggregation(spec, dataset, mine, out / model.name, aggregation)
    return {
        **tally, "per_profile": per_profile,
        "max_weights_error": max((s["tolerance_max_weights_error"] for s in per_profile.values()), default=None),
        "max_moment_error": max((s["tolerance_max_moment_error"] for s in per_profile.values()), default=None),
        "failures": failures[:5], "aggregation": aggregation,
    }


def _check_child_aggregation(spec, dataset, records, directory: pathlib.Path, tally: dict) -> None:
    """Round r + 1's committed start weights must be the aggregate of round r's updates; stale ones not.

    W_0 is taken from the child's own checkpoint 0: `initial_weights` is not bitwise the same under every
    instruction set (counted in `initial_weights_differ`), and this check is about the outer step."""
    first = next(r for r in records if r["round"] == 0)
    listing = json.loads((directory / f"worker-{first['worker_index']}" / "tasks" / str(first["model"]) / "rounds" / "0"
                          / "checkpoints.json").read_text())["checkpoint_hashes"]
    zero = decode_checkpoint((directory / f"worker-{first['worker_index']}" / "blobs" / listing[0][:2] / listing[0]).read_bytes())
    state = GlobalState.initial(zero.weights)
    tally["initial_weights_differ"] += int(state.weights_hash() != weights_hash(initial_weights(spec, dataset.shape)))
    rounds = sorted({r["round"] for r in records})
    for round_index in rounds:
        encoded = []
        for record in sorted((r for r in records if r["round"] == round_index), key=lambda r: r["worker_index"]):
            blob = directory / f"worker-{record['worker_index']}" / "blobs" / record["update_hash"][:2] / record["update_hash"]
            encoded.append((record["worker_index"], record["samples_processed"], blob.read_bytes()))
        next_start = {bytes.fromhex(r["start_weights_hash"]) for r in records if r["round"] == round_index + 1}
        for claimed in next_start:
            report = check_aggregation(state, encoded, spec, claimed)
            tally["rounds_checked"] += 1
            tally["matches"] += int(report.matches)
        if round_index != rounds[-1]:
            stale = check_aggregation(state, encoded, spec, state.weights_hash())
            tally["stale_start_rejected"] += int(not stale.matches)
        state = aggregate_round(state, encoded, spec)
    # The honest final report: W_R's hash, as every member reports it, judged against W_R derived here.
    tally["final_reports_checked"] += 1
    final = final_report_claim(records[-1]["worker_index"], state.weights_hash())
    tally["final_reports_passed"] += int(verify_final_report(final, state.weights_hash()).outcome == PASSED)


# ---- cheats, in this process ------------------------------------------------------------------------------


def foreign_profile() -> str:
    """A profile id this process cannot run exactly: forces the tolerance rule."""
    other = "default" if current_instruction_set() != "default" else "avx2"
    return f"torch-{torch.__version__}/threads-1/isa-{other}/deterministic-ftz"


def final_report_claim(worker: int, reported_hash: bytes) -> SegmentClaim:
    """A member's final report as the chain samples it: one check, the reported final weights hash."""
    return SegmentClaim(task_id=1, round=1, worker=f"worker-{worker}", worker_index=worker,
                        segment=FINAL_REPORT_SEGMENT, checkpoint_root=b"", num_checkpoints=0, steps=0,
                        samples_processed=0, start_weights_hash=reported_hash, determinism_profile="")


def cheat_names() -> list[str]:
    """The cheats of the matrix: every one registered (`compute.cheats`, and `--cheat-module` files), in order."""
    return list(CHEATS)


def verify_cheats(models, names, trials: int, exact: Replayer, tolerant: Replayer | None,
                  kernel: str = TORCH_KERNEL) -> dict:
    """Each faked segment judged by the real verifier under the profile the round was made with (bitwise) and,
    separately, within the tolerance (claiming an instruction set the tolerant verifier cannot run). Under the
    `wasm32` kernel (`tolerant` None): the rounds trained and committed as a browser worker's, judged bitwise
    only, since every verifier replays the kernel (no tolerance exists for it)."""
    detection: dict[str, dict] = {}
    for model in models:
        dataset = dataset_for(model.dataset)
        spec = make_spec(model, dataset.manifest_hash, kernels=(kernel,))
        trainer = trainer_for(spec, dataset, kernel)
        own = trainer.profile_id
        round0 = initial_weights(spec, dataset.shape)
        noise = torch.Generator().manual_seed(99)
        round1 = {n: t + 1e-3 * torch.randn(t.shape, generator=noise) for n, t in round0.items()}
        segments = spec.num_checkpoints(spec.training.inner_steps) - 1
        for name in names:
            tally = detection.setdefault(name, {"faked_segments": 0, "caught": 0, "caught_under_tolerance": 0,
                                                "min_weights_error": math.inf, "min_moment_error": math.inf})
            for trial in range(trials):
                generator = torch.Generator().manual_seed(1000 * trial + len(name))
                faked = choose_faked_segments(segments, 1 / 3, generator)
                worker = trial % 3

                def base(worker_index, round_index, weights):
                    return CheatContext(trainer, weights, worker_index, round_index, spec.training.inner_steps,
                                        frozenset(), torch.Generator().manual_seed(7))

                context = CheatContext(
                    trainer, round1, worker, 1, spec.training.inner_steps, faked, generator,
                    other_worker_round=lambda: honest_round(base((worker + 1) % 3, 1, round1)),
                    earlier_round=lambda: honest_round(base(worker, 0, round0)))
                cheat = get_cheat(name)
                cheated = cheat.play(context)
                if cheat.final is not None:  # a cheat on the final report: here round 1's start stands for W_R
                    derived = weights_hash(round1)
                    caught = verify_final_report(final_report_claim(worker, cheat.final(derived)), derived).outcome != PASSED
                    tally["faked_segments"] += 1
                    tally["caught"] += int(caught)
                    tally["caught_under_tolerance"] += int(caught)  # a hash comparison: no tolerance involved
                published = cheated.publish()
                source = MemorySource()
                source.add_round(1, 1, published.listing, published.blobs)
                for segment in sorted(cheated.faked_segments):
                    verdicts = []
                    judges = ((own, exact),) if tolerant is None else ((own, exact), (foreign_profile(), tolerant))
                    for profile, replayer in judges:
                        claim = SegmentClaim(
                            task_id=1, round=1, worker=f"worker-{worker}", worker_index=worker, segment=segment,
                            checkpoint_root=published.checkpoint_root, num_checkpoints=len(published.listing),
                            steps=cheated.steps, samples_processed=cheated.samples_processed,
                            start_weights_hash=cheated.start_weights_hash, determinism_profile=profile,
                            update_hash=published.update_hash, residual_hash=published.residual_hash)
                        report = asyncio.run(verify_segment(claim, spec, dataset, source, replayer,
                                                            expected_start_hash=weights_hash(round1), spec_key=model.name))
                        verdicts.append(report.outcome != PASSED)
                        if report.comparison is not None and report.comparison.mode == TOLERANCE:
                            tally["min_weights_error"] = min(tally["min_weights_error"], report.comparison.weights_error)
                            tally["min_moment_error"] = min(tally["min_moment_error"], report.comparison.moment_error)
                    tally["faked_segments"] += 1
                    tally["caught"] += int(verdicts[0])
                    tally["caught_under_tolerance"] += int(verdicts[-1])
    return detection


# ---- cost -------------------------------------------------------------------------------------------------


UPDATE_CHECKS_PER_REPEAT = 3
"""Update checks timed per repeat of the cost measurement, beside its round of 20 segments: enough for a
per-check figure (the fraction counts the reference task's 20 checks per worker)."""


@dataclasses.dataclass
class CostRound:
    """One honest round of the cost model, published to an in-memory source, and what verifying it needs."""

    model: Model
    spec: object
    dataset: object
    trainer: Trainer
    start: dict
    published: object
    honest: object
    source: MemorySource
    profile: str
    """The determinism profile the round was trained and is committed under."""

    @property
    def segments(self) -> int:
        return len(self.published.listing) - 1

    def claim(self, segment: int) -> SegmentClaim:
        honest, published = self.honest, self.published
        return SegmentClaim(1, 0, "worker-0", 0, segment, published.checkpoint_root, len(published.listing),
                            honest.steps, honest.samples_processed, honest.start_weights_hash,
                            self.profile, update_hash=published.update_hash,
                            residual_hash=published.residual_hash)


def prepare_cost_round(model: Model, inner_steps: int = 100, kernel: str = TORCH_KERNEL) -> CostRound:
    """`model` at the reference task's k, trained once for warm-up under `kernel`, and one honest round of it
    published."""
    model = dataclasses.replace(model, checkpoint_every=REFERENCE_TASK["checkpoint_every"], inner_steps=inner_steps)
    dataset = dataset_for(model.dataset)
    spec = make_spec(model, dataset.manifest_hash, kernels=(kernel,))
    trainer = trainer_for(spec, dataset, kernel)
    start = initial_weights(spec, dataset.shape)
    run_round(trainer, start, worker_index=0, round_index=0, steps=10)  # warm-up
    context = CheatContext(trainer, start, 0, 0, spec.training.inner_steps, frozenset(), torch.Generator())
    honest = honest_round(context)
    published = honest.publish()
    source = MemorySource()
    source.add_round(1, 0, published.listing, published.blobs)
    return CostRound(model, spec, dataset, trainer, start, published, honest, source, trainer.profile_id)


async def verify_cost_round(setup: CostRound, replayer: Replayer, off_loop) -> None:
    """Every segment of the round as the service verifies: one event loop, SERVICE_CONCURRENCY segments in flight
    (one fetches and hash-checks while another replays), every replay on the one executor thread, and one update
    check for the round, which the segments in flight share."""
    replayer.update_checks.clear()
    slots = asyncio.Semaphore(SERVICE_CONCURRENCY)
    segments = setup.segments

    async def verify_one(segment: int) -> None:
        async with slots:
            report = await verify_segment(setup.claim(segment), setup.spec, setup.dataset, setup.source, replayer,
                                          spec_key="cost", run_replay=off_loop)
            if report.outcome != PASSED:
                raise SystemExit(f"honest cost-measurement segment failed: {report.reason}")

    order = [segment for pair in zip(range(segments // 2), range(segments // 2, segments)) for segment in pair]
    order += list(range(2 * (segments // 2), segments))
    await asyncio.gather(*(verify_one(segment) for segment in order))


async def check_cost_updates(setup: CostRound, replayer: Replayer, off_loop) -> None:
    """The once-per-worker-round update check on its own, UPDATE_CHECKS_PER_REPEAT times, no result cached (only
    the encoder's scratch, which a verifier keeps for every check: `UpdateChecks.workspace`)."""
    for _ in range(UPDATE_CHECKS_PER_REPEAT):
        checks = UpdateChecks(workspace=replayer.update_checks.workspace)
        verdict = await check_round_update(setup.claim(0), setup.spec, setup.dataset, setup.source,
                                           list(setup.published.listing), {}, checks, off_loop,
                                           VerifiedBlobs(max_bytes=0))
        if verdict.outcome != PASSED:
            raise SystemExit(f"honest cost-measurement update check failed: {verdict.reason}")


def cost_figures(setup: CostRound, clocks: dict, steps: int, repeats: int) -> dict:
    """Per step, segment and update check, wall and CPU, scaled to the reference task."""
    per_step, per_segment, per_check = (
        [value / count for value in clocks[phase]]
        for phase, count in (("train", steps), ("segments", repeats * setup.segments),
                             ("checks", repeats * UPDATE_CHECKS_PER_REPEAT)))
    task_steps = REFERENCE_TASK["rounds"] * REFERENCE_TASK["inner_steps"]
    samples = REFERENCE_TASK["rounds"] * REFERENCE_TASK["samples_per_worker_round"]
    every = REFERENCE_TASK["checkpoint_every"]
    verifying = [samples * segment + REFERENCE_TASK["rounds"] * check for segment, check in zip(per_segment, per_check)]
    return {
        "model": setup.model.name, "seconds_per_trained_step": per_step[0],
        "seconds_per_verified_segment": per_segment[0], "seconds_per_update_check": per_check[0],
        "replay_step_cost_ratio": per_segment[0] / (every * per_step[0]),
        "samples_per_worker_per_task": samples,
        "fraction": verifying[0] / (task_steps * per_step[0]),
        # The same in CPU time (every thread of this process: the training's checkpoint hashing, the
        # verifier's hashing beside its replays), which other work on the machine changes less than
        # wall-clock time: what verifying costs where cores are not to spare.
        "cpu_seconds_per_trained_step": per_step[1], "cpu_seconds_per_verified_segment": per_segment[1],
        "cpu_seconds_per_update_check": per_check[1],
        "replay_step_cpu_ratio": per_segment[1] / (every * per_step[1]),
        "cpu_fraction": verifying[1] / (task_steps * per_step[1]),
        "repeats": repeats,
        "pol_fraction_reference": "0.26-0.51 (Jia et al. 2021)",
    }


def measure_cost(model: Model, replayer: Replayer, repeats: int, inner_steps: int = 100,
                 kernel: str = TORCH_KERNEL) -> dict:
    """Seconds per trained step, per verified segment and per update check for `model` (k = REFERENCE_TASK's).

    Training a round, verifying its segments and the update checks take turns, `repeats` times, so that other
    work on the machine weighs on the three alike (timed one phase after the other, a load that came or went in
    between moved the ratios from run to run)."""
    setup = prepare_cost_round(model, inner_steps, kernel)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # replays off the event loop, as in the service

    def off_loop(function):
        return asyncio.get_running_loop().run_in_executor(executor, function)

    # The reference task samples 3 of 100 segments a round, rarely neighbours, so no checkpoint is at hand
    # from another segment's check: nothing is kept between segments here either.
    replayer.verified_blobs = VerifiedBlobs(max_bytes=0)
    # Warm-up, as for training above: the replayer builds its model and optimizer for this spec once, and a
    # verifier keeps them for every segment of the task (`Replayer.trainer`); only that is kept from it.
    asyncio.run(verify_segment(setup.claim(0), setup.spec, setup.dataset, setup.source, replayer, spec_key="cost"))
    clocks = {phase: [0.0, 0.0] for phase in ("train", "segments", "checks")}  # wall, CPU seconds

    def timed(phase: str, function):
        wall, cpu = time.perf_counter(), time.process_time()
        result = function()
        clocks[phase][0] += time.perf_counter() - wall
        clocks[phase][1] += time.process_time() - cpu
        return result

    steps = 0
    for round_index in range(repeats):
        steps += timed("train", lambda: run_round(setup.trainer, setup.start, worker_index=0, round_index=round_index,
                                                  steps=setup.spec.training.inner_steps,
                                                  sink=lambda record, data: None)).steps
        timed("segments", lambda: asyncio.run(verify_cost_round(setup, replayer, off_loop)))
        timed("checks", lambda: asyncio.run(check_cost_updates(setup, replayer, off_loop)))
    executor.shutdown()
    return cost_figures(setup, clocks, steps, repeats)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one tiny model, fewer trials (about a minute or two)")
    parser.add_argument("--cheat-module", action="append", default=[], metavar="FILE",
                        help="a Python file registering more cheats (repeatable)")
    parser.add_argument("--honest-child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def honest_profiles(quick: bool) -> list[tuple[int, str]]:
    """The (threads, instruction set) profiles the honest children train under, without repeats: `native` is
    what a worker on this CPU trains under (the package pinned it before torch loaded)."""
    native = current_instruction_set()
    profiles = [(1, native), (2, native), (1, "avx2"), (2, "default")]
    if not quick:
        profiles += [(1, "default"), (2, "avx2")]
    return list(dict.fromkeys(profiles))


def run_matrices(quick: bool, models, profiles: list[tuple[int, str]]) -> tuple[dict, dict, dict, dict]:
    """The honest matrix, the cheat matrix and the cost measurement, with one exact and one tolerance-measuring
    verifier shared by all three; then the cheat matrix and the cost under the `wasm32` profile (its MLP models:
    the kernel trains nothing else)."""
    workers, rounds = (3, 2) if quick else (3, 3)
    exact, tolerant = Replayer(), Replayer(children=False, tolerance_fallback=True)
    began = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="trolly-verification-") as directory:
            children = run_honest_children(models, profiles, workers, rounds, pathlib.Path(directory))
            print(f"honest workers trained in {time.perf_counter() - began:.1f}s", file=sys.stderr)
            honest = verify_honest(models, children, exact, tolerant)
        print(f"honest segments verified: {honest['segments']}, false positives {honest['false_positives']} "
              f"(under tolerance only: {honest['tolerance_false_positives']} of {honest['tolerance_segments']})",
              file=sys.stderr)
        cheats = verify_cheats(models, cheat_names(), 3 if quick else 6, exact, tolerant)
        print(f"cheats: {json.dumps(cheats, default=str)}", file=sys.stderr)
        cost = measure_cost(COST_MODEL, exact, 3 if quick else 6)
        wasm32 = {"cheats": verify_cheats([m for m in models if m.arch == "mlp"], cheat_names(), 3 if quick else 6,
                                          exact, None, WASM32_KERNEL),
                  "cost": measure_cost(COST_MODEL, exact, 2 if quick else 3, 50 if quick else 100, WASM32_KERNEL)}
        print(f"wasm32 cheats: {json.dumps(wasm32['cheats'], default=str)}", file=sys.stderr)
    finally:
        exact.close()
        tolerant.close()
    return honest, cheats, cost, wasm32


def wasm32_summary(wasm32: dict, cpu_cost: dict) -> dict:
    """The `wasm32` profile's column: its detection per cheat and its verifier cost fraction, beside the CPU
    profile's (the kernel's training and its replay are both slower than torch's, so the fraction is what
    matters: the share of a wasm32 worker's own training that verifying it costs)."""
    cheats, cost = wasm32["cheats"], wasm32["cost"]
    return {
        "profile": WASM32_PROFILE,
        "detection": {name: t["caught"] / t["faked_segments"] for name, t in cheats.items() if t["faked_segments"]},
        "faked_segments": {name: t["faked_segments"] for name, t in cheats.items()},
        "verifier_compute_fraction": cost["fraction"],
        "cpu_profile_verifier_compute_fraction": cpu_cost["fraction"],
        "replay_step_cost_ratio": cost["replay_step_cost_ratio"],
        "seconds_per_trained_step": cost["seconds_per_trained_step"],
        "cpu_profile_seconds_per_trained_step": cpu_cost["seconds_per_trained_step"],
        "cost": cost,
    }


def summarize(honest: dict, cheats: dict, cost: dict) -> dict:
    """The JSON line's figures from the three measurements (without the run's settings)."""
    detection = {name: t["caught"] / t["faked_segments"] for name, t in cheats.items() if t["faked_segments"]}
    under_tolerance = {name: t["caught_under_tolerance"] / t["faked_segments"] for name, t in cheats.items()
                       if t["faked_segments"]}
    weakest = min(detection.values())
    samples = cost["samples_per_worker_per_task"]
    return {
        "detection": detection,
        "false_positive_rate": honest["false_positives"] / honest["segments"],
        "honest_segments": honest["segments"],
        "task_detection_at_f_0_1": sampling.task_detection(FRACTION_FAKED, samples, weakest),
        "samples_needed_for_0_99_at_f_0_1": sampling.samples_for_detection(FRACTION_FAKED, TARGET, weakest),
        "verifier_compute_fraction": cost["fraction"],
        "replay_step_cost_ratio": cost["replay_step_cost_ratio"],
        "tolerance_fallback": {
            "detection": under_tolerance,
            "false_positive_rate": (honest["tolerance_false_positives"] / honest["tolerance_segments"]
                                    if honest["tolerance_segments"] else None),
            "honest_segments": honest["tolerance_segments"],
        },
        "cost": cost,
        "reference_task": REFERENCE_TASK,
        "calibration": {
            "weights_threshold": WEIGHTS_THRESHOLD, "moments_threshold": MOMENTS_THRESHOLD,
            "max_honest_weights_error": honest["max_weights_error"],
            "max_honest_moment_error": honest["max_moment_error"],
            "min_cheat_weights_error": {n: t["min_weights_error"] for n, t in cheats.items()},
            "min_cheat_moment_error": {n: t["min_moment_error"] for n, t in cheats.items()},
            "per_profile": honest["per_profile"],
        },
        "aggregation": honest["aggregation"],
        "faked_segments": {name: t["faked_segments"] for name, t in cheats.items()},
        "honest_failures": honest["failures"],
    }


def main(argv: list[str] | None = None) -> None:
    options = parse_arguments(argv)
    if options.honest_child:
        honest_child(json.loads(options.honest_child))
        return
    torch.set_num_threads(1)
    for path in options.cheat_module:
        print(f"loaded cheats {load_cheat_module(path)} from {path}", file=sys.stderr)
    models = QUICK_MODELS if options.quick else FULL_MODELS
    profiles = honest_profiles(options.quick)
    began = time.perf_counter()
    honest, cheats, cost, wasm32 = run_matrices(options.quick, models, profiles)
    result = summarize(honest, cheats, cost)
    result.update({
        "wasm32": wasm32_summary(wasm32, cost),
        "profiles": [f"threads-{t}/isa-{i}" for t, i in profiles],
        "models": [m.name for m in models],
        "seconds": round(time.perf_counter() - began, 1),
        "quick": options.quick,
    })
    print(json.dumps(result, default=lambda v: str(v)))


if __name__ == "__main__":
    main()
