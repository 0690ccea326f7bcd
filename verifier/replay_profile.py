"""How a segment is replayed: exactly under the committed determinism profile, or not at all.

`Replayer.plan` reads the committed profile id (docs/protocol.md 2a, `torch-<v>/threads-<n>/isa-<set>/
deterministic`): the thread count is set per replay; an instruction set other than this process's runs in a
child process (`isa_child_replay.py`). Only `REPLAYABLE_INSTRUCTION_SETS` are accepted, the ones every verifier
replays bit for bit; a profile naming another (avx512, which many verifiers' CPUs lack), more threads than
`MAX_REPLAY_THREADS`, another torch version or a malformed id is refused (`ProfileRefused`: FAIL). A worker
that could commit a profile some verifiers only judge within a tolerance would move its own verification
onto the tolerance, where an fp16 cheat passes most segments; refusing it leaves every verdict bitwise.

A GPU profile (`torch-<v>/threads-<n>/isa-<set>/gpu-<model>+driver-<v>+cuda-<v>/<mode>`, `compute/devices.py`)
replays bit for bit only on the same GPU model, driver and CUDA build. The chain draws a GPU segment's committee
from the validators that declared that GPU, and sends a disputed one to the whole validator set
(docs/protocol.md 4.4), whose members mostly lack it: such a verifier replays the profile's CPU part (its thread
count and instruction set, bit for bit the same on every verifier, so their digests agree) and judges the GPU's
bytes within the tolerance (`tolerance.py`), since nothing random runs in a step. Only a verifier that can run
neither (its own GPU but another instruction set in process, or an instruction set it cannot start) cannot judge
it: `ProfileNotHere`, and it votes nothing on the segment (`service.py`).

The `wasm32` profile (`wasm32/kernel-<v>`, docs/browser-worker.md) is the browser worker's kernel: its bytes
depend on no machine, so every verifier replays it in this process with the same .wasm under wasmtime
(`compute.wasm.segment`) and compares bit for bit, as it does a CPU profile; a task whose spec does not allow the
`wasm32` kernel never pays for one (the chain refuses the commitment), and a replay here refuses it as well.

For CPU profiles the tolerance comparison stays available to measurements only (`Replayer(tolerance_fallback=True)`,
the benchmark's calibration of what such a fallback would let through); a GPU segment judged on a CPU is its one
use in a vote.
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch

from trolly.compute.checkpoints import TrainingState, decode_checkpoint
from trolly.compute.devices import cuda_description, parse_gpu_profile_part
from trolly.compute.data.dataset import Dataset
from trolly.compute.determinism import (INSTRUCTION_SETS, MODE, REPLAYABLE_INSTRUCTION_SETS, DeterminismProfile,
                                        apply_profile, current_instruction_set)
from trolly.compute.instruction_sets import unpinned_libraries
from trolly.compute.spec import TaskSpec
from trolly.compute.training import Trainer, segment_bounds, train_segment
from trolly.compute.wasm.profile import PROFILE_ID as WASM32_PROFILE, WASM32
from trolly.compute.wasm.segment import WasmTrainer, train_segment_wasm

from .blob_cache import VerifiedBlobs
from .errors import VerifierError
from .isa_child_replay import IsaReplayPool, supported_instruction_sets
from .update_check import UpdateChecks

MAX_REPLAY_THREADS = 64
"""A profile claiming more threads than this is refused: replaying it would take that many threads' state."""


def parse_profile(profile_id: str) -> tuple[str, int, str] | None:
    """(torch version, threads, instruction set) of a profile id, None if it is not one (a GPU profile's GPU
    part: `profile_gpu`)."""
    parts = profile_id.split("/")
    if len(parts) == 5 and parse_gpu_profile_part(parts[3]) is not None:
        parts = [*parts[:3], parts[4]]
    if len(parts) != 4 or not parts[0].startswith("torch-") or parts[3] != MODE:
        return None
    if not parts[1].startswith("threads-") or not parts[2].startswith("isa-"):
        return None
    threads = parts[1][len("threads-"):]
    if not threads.isdigit() or int(threads) < 1:
        return None
    return parts[0][len("torch-"):], int(threads), parts[2][len("isa-"):]


def profile_gpu(profile_id: str) -> str | None:
    """The GPU part of a profile id (`devices.gpu_profile_part`), None for a CPU profile."""
    parts = profile_id.split("/")
    return parts[3] if len(parts) == 5 and parse_gpu_profile_part(parts[3]) is not None else None


def local_gpu() -> str | None:
    """This machine's GPU part, None without CUDA: the GPU profiles it replays."""
    return cuda_description() if torch.cuda.is_available() else None


class ProfileRefused(Exception):
    """The committed determinism profile is not one this protocol's software can produce (reason in args)."""


class ProfileNotHere(VerifierError):
    """The committed profile is a GPU this verifier does not have: no fault of the worker's, no vote here."""


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """How a segment is replayed: in this process, in a child under another instruction set, or (a profile
    this CPU cannot run) in this process and compared within the tolerance."""

    where: str  # "process", "child", "tolerance" or "wasm32" (the kernel under wasmtime, in this process)
    threads: int
    instruction_set: str
    gpu: str | None = None  # a GPU profile's GPU part: replayed on this process's own GPU (None: on the CPU)


class Replayer:
    """Replays segments exactly under the committed profile, and refuses profiles it cannot replay exactly.

    The committed profile names torch's version, the thread count and the instruction set (docs/protocol.md
    section 2a). The thread count is set per replay; an instruction set other than this process's is run in a
    child process (`isa_child_replay.py`). A profile naming another torch version, an instruction set outside
    `REPLAYABLE_INSTRUCTION_SETS`, one this CPU cannot run, or one the spec rules out, is refused: accepting
    it would hand a cheater the tolerance's slack (`tolerance_fallback=True`, for measurements only, judges
    the ones this CPU cannot run within the tolerance instead).

    One `Trainer` per (spec, thread count) stays alive. Not thread-safe: the service runs every replay in one
    thread (torch's thread count is a process-wide setting). `close()` ends the children.
    """

    def __init__(self, cache_size: int = 4, *, children: bool = True, tolerance_fallback: bool = False) -> None:
        self._trainers: dict[tuple, Trainer | WasmTrainer] = {}
        self._cache_size = cache_size
        self.instruction_set = current_instruction_set()
        self.in_process_instruction_set = (None if unpinned_libraries(self.instruction_set, os.environ)
                                           else self.instruction_set)
        """What replays in this process: its own instruction set where every library is pinned to it
        (`compute.instruction_sets`), else nothing (each replay runs in a pinned child)."""
        self.exact_instruction_sets = (supported_instruction_sets(self.instruction_set) if children
                                       else tuple(filter(None, (self.in_process_instruction_set,))))
        self.gpu = local_gpu()
        """This machine's GPU part (`devices.gpu_profile_part`), None without CUDA: the one GPU profile it replays."""
        self._pool = IsaReplayPool()
        self.tolerance_fallback = tolerance_fallback
        """Measurements only: judge a profile this CPU cannot run within the tolerance instead of refusing it."""
        self.verified_blobs = VerifiedBlobs()
        """Blobs fetched and hash-checked already: each is hashed once (`blob_cache.py`)."""
        self.update_checks = UpdateChecks()
        """Update-check results, shared by the sampled segments of one worker's round (`update_check.py`)."""
        self.replayed_steps = 0
        self.replay_seconds = 0.0
        self.last_losses: list[float] = []
        """The per-step losses of the last replay (read right after it, in the same replay thread)."""

    def close(self) -> None:
        self._pool.close()

    def plan(self, spec: TaskSpec, committed_profile: str) -> ReplayPlan:
        if committed_profile == WASM32_PROFILE:
            if WASM32 not in spec.kernels:
                raise ProfileRefused(f"the committed profile is {WASM32_PROFILE}, a kernel the spec does not allow "
                                     f"(determinism.kernels: {', '.join(spec.kernels)})")
            return ReplayPlan(WASM32, 1, WASM32)
        parsed = parse_profile(committed_profile)
        if parsed is None:
            raise ProfileRefused(f"the committed determinism profile {committed_profile!r} is not a profile id")
        version, threads, instruction_set = parsed
        if version != torch.__version__:
            raise ProfileRefused(f"the committed profile names torch {version}; this protocol replays torch {torch.__version__}")
        if instruction_set not in INSTRUCTION_SETS:
            raise ProfileRefused(f"the committed profile names an unknown instruction set {instruction_set!r}")
        if instruction_set not in REPLAYABLE_INSTRUCTION_SETS and not self.tolerance_fallback:
            raise ProfileRefused(f"the committed profile names instruction set {instruction_set}, which not every "
                                 f"verifier replays exactly; accepted: {', '.join(REPLAYABLE_INSTRUCTION_SETS)}")
        if spec.determinism.instruction_set not in (None, instruction_set):
            raise ProfileRefused(f"the spec requires instruction set {spec.determinism.instruction_set}, "
                                 f"the commitment names {instruction_set}")
        gpu = profile_gpu(committed_profile)
        if gpu is not None and threads <= MAX_REPLAY_THREADS:
            if gpu == self.gpu and instruction_set == self.in_process_instruction_set:
                return ReplayPlan("process", threads, instruction_set, gpu)
            if gpu != self.gpu:  # the chain put it here only for the whole set's check: its CPU part, in tolerance
                return self.cpu_plan_for_gpu(threads, instruction_set, gpu)
        if gpu is not None:
            raise ProfileNotHere(f"the segment was trained on {gpu} under isa-{instruction_set}; this verifier "
                                 f"replays {self.gpu or 'no GPU'} under isa-{self.in_process_instruction_set}")
        if threads > MAX_REPLAY_THREADS:
            if not self.tolerance_fallback:
                raise ProfileRefused(f"the committed profile claims {threads} threads; at most {MAX_REPLAY_THREADS} "
                                     "are replayed")
            return ReplayPlan("tolerance", spec.determinism.threads, self.instruction_set)
        if instruction_set == self.in_process_instruction_set:
            return ReplayPlan("process", threads, instruction_set)
        if instruction_set in self.exact_instruction_sets:
            return ReplayPlan("child", threads, instruction_set)
        if not self.tolerance_fallback:
            raise ProfileRefused(f"this verifier cannot replay instruction set {instruction_set} exactly "
                                 f"(its CPU runs {self.instruction_set}); a segment it cannot replay exactly is FAIL")
        return ReplayPlan("tolerance", spec.determinism.threads, self.instruction_set)

    def cpu_plan_for_gpu(self, threads: int, instruction_set: str, gpu: str) -> ReplayPlan:
        """The plan for a GPU-trained segment on a verifier without that GPU: the profile's CPU part (its thread
        count and instruction set, which every verifier replays bit for bit, so that such replays agree with each
        other and their digests can be compared), judged against the GPU's bytes within the tolerance."""
        if instruction_set == self.in_process_instruction_set:
            return ReplayPlan("process", threads, instruction_set)
        if instruction_set in self.exact_instruction_sets:
            return ReplayPlan("child", threads, instruction_set)
        raise ProfileNotHere(f"the segment was trained on {gpu} under isa-{instruction_set}; this verifier has "
                             f"neither that GPU nor a way to run isa-{instruction_set}")

    def trainer(self, spec: TaskSpec, dataset: Dataset, profile: DeterminismProfile, spec_key: str) -> Trainer:
        key = (spec_key, dataset.manifest_hash, profile.threads, profile.device)
        trainer = self._trainers.get(key)
        if trainer is None:
            if len(self._trainers) >= self._cache_size:
                self._trainers.pop(next(iter(self._trainers)))
            trainer = Trainer(dataclasses.replace(spec, determinism=profile), dataset)
            self._trainers[key] = trainer
        apply_profile(trainer.spec.determinism)  # another trainer may have changed the thread count since
        return trainer

    def wasm_trainer(self, spec: TaskSpec, dataset: Dataset, spec_key: str) -> WasmTrainer:
        """The kernel set up for a task's model and data (`compute.wasm.segment`), kept beside the torch trainers."""
        key = (spec_key, dataset.manifest_hash, WASM32)
        trainer = self._trainers.get(key)
        if trainer is None:
            if len(self._trainers) >= self._cache_size:
                self._trainers.pop(next(iter(self._trainers)))
            trainer = self._trainers[key] = WasmTrainer(spec, dataset)
        return trainer

    def replay(self, spec: TaskSpec, dataset: Dataset, claim, start: TrainingState, start_bytes: bytes,
               spec_key: str = "") -> tuple[TrainingState, bool, str]:
        """(replayed end state, whether it ran exactly the committed profile, the profile id it ran under).

        Raises ProfileRefused for a profile no honest worker can have committed, ProfileNotHere for a GPU this
        verifier does not have."""
        plan = self.plan(spec, claim.determinism_profile)
        _, end_step = segment_bounds(claim.segment, claim.steps, spec.training.checkpoint_every)
        began = time.perf_counter()
        self.last_losses = []  # each replayed step's loss: what a vote commits to (verifier/evidence.py)
        if plan.where == WASM32:
            state = train_segment_wasm(self.wasm_trainer(spec, dataset, spec_key or claim.spec_hash), start,
                                       worker_index=claim.worker_index, round_index=claim.round, end_step=end_step,
                                       losses=self.last_losses)
            profile_id = WASM32_PROFILE
        elif plan.where == "child":
            child = self._pool.child(plan.instruction_set)
            end_bytes, profile_id = child.replay(
                spec, dataset, threads=plan.threads, worker_index=claim.worker_index, round_index=claim.round,
                end_step=end_step, start_bytes=start_bytes, spec_key=spec_key or claim.spec_hash)
            state = decode_checkpoint(end_bytes)
            self.last_losses = child.last_losses
        else:
            profile = DeterminismProfile(threads=plan.threads, device="cuda" if plan.gpu else "cpu", gpu=plan.gpu)
            trainer = self.trainer(spec, dataset, profile, spec_key or claim.spec_hash)
            state = train_segment(trainer, start, worker_index=claim.worker_index, round_index=claim.round,
                                  end_step=end_step, losses=self.last_losses)
            profile_id = trainer.profile_id
        self.replay_seconds += time.perf_counter() - began
        self.replayed_steps += end_step - start.step
        return state, plan.where != "tolerance" and profile_id == claim.determinism_profile, profile_id
