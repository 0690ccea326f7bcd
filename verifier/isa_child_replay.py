"""Replays under another instruction set, in a child process, so that they too are bitwise.

`ATEN_CPU_CAPABILITY` is read once, when torch is imported, so a process cannot switch its instruction set;
but a verifier whose CPU supports the instruction set a worker committed to (default < avx2 < avx512) can
start a child with that setting (`compute.determinism.child_environment`) and replay there bit for bit. This
matters: honest drift across instruction sets is of the same order as an fp16 cheat (the calibration in
docs/performance.md, from benchmarks/verification.py), so a tolerance cannot
separate them; an exact replay can.

One long-lived child per instruction set (`IsaReplayPool`), spoken to over its stdin/stdout with
length-prefixed pickles (parent and child are the same program; nothing from the network is unpickled:
the parent sends the checkpoint as its canonical bytes, which the child decodes with the usual checks).

    python -m trolly.verifier.isa_child_replay          # the child's entry point (started by the pool)
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO

from trolly.compute.determinism import INSTRUCTION_SETS, DeterminismProfile, child_environment
from trolly.compute.instruction_sets import cpu_flags, runnable_instruction_sets

from .errors import VerifierError

_LENGTH = struct.Struct("<Q")


class ReplayChildError(VerifierError):
    """The replay child could not be started, died, or reported an error."""


def supported_instruction_sets(current: str, flags: frozenset[str] | None = None) -> tuple[str, ...]:
    """The instruction sets this machine's CPU runs (its `flags`, read from the CPU by default), this process's
    `current` one among them: what the CPU can do, not what this process was pinned to (a verifier started
    under `ATEN_CPU_CAPABILITY=default` on an avx2 CPU still replays avx2 segments, in a child)."""
    runnable = set(runnable_instruction_sets(cpu_flags() if flags is None else flags)) | {current}
    return tuple(name for name in INSTRUCTION_SETS if name in runnable) or (current,)


def _write(stream: BinaryIO, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read(stream: BinaryIO) -> Any:
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError("replay channel closed")
    (length,) = _LENGTH.unpack(header)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("replay channel closed mid-message")
    return pickle.loads(data)


def picklable_spec(spec):
    """The spec with its read-only config mapping turned into a plain dict (MappingProxyType cannot pickle)."""
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, config=dict(spec.model.config)))


class IsaReplayChild:
    """One child process replaying under `instruction_set`."""

    def __init__(self, instruction_set: str) -> None:
        self.instruction_set = instruction_set
        environment = child_environment(DeterminismProfile(threads=1, instruction_set=instruction_set))
        try:
            self._process = subprocess.Popen([sys.executable, "-m", "trolly.verifier.isa_child_replay"],
                                             env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as error:
            raise ReplayChildError(f"cannot start a replay child for {instruction_set}: {error}") from None
        self._datasets: set[str] = set()
        self._lock = threading.Lock()
        self.last_losses: list[float] = []
        """The per-step losses of the last replay (verifier/evidence.py)."""

    def replay(self, spec, dataset, *, threads: int, worker_index: int, round_index: int, end_step: int,
               start_bytes: bytes, spec_key: str) -> tuple[bytes, str]:
        """(end checkpoint bytes, the child's profile id)."""
        with self._lock:
            request = {"spec": picklable_spec(spec), "spec_key": spec_key, "dataset_key": dataset.manifest_hash,
                       "dataset": None if dataset.manifest_hash in self._datasets else dataset, "threads": threads,
                       "worker_index": worker_index, "round_index": round_index, "end_step": end_step,
                       "start": start_bytes}
            try:
                _write(self._process.stdin, request)
                answer = _read(self._process.stdout)
            except (OSError, EOFError, pickle.UnpicklingError) as error:
                raise ReplayChildError(f"replay child ({self.instruction_set}) failed: {error}") from None
            self._datasets.add(dataset.manifest_hash)
        if not answer.get("ok"):
            raise ReplayChildError(f"replay child ({self.instruction_set}): {answer.get('error')}")
        self.last_losses = list(answer.get("losses", []))
        return answer["end"], answer["profile_id"]

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.close()
                self._process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait(5)


class IsaReplayPool:
    """Children started on first use, one per instruction set; `close()` ends them."""

    def __init__(self) -> None:
        self._children: dict[str, IsaReplayChild] = {}

    def child(self, instruction_set: str) -> IsaReplayChild:
        existing = self._children.get(instruction_set)
        if existing is not None and not existing.alive:
            existing.close()  # it died (killed, out of memory): start a fresh one
            del self._children[instruction_set]
        if instruction_set not in self._children:
            self._children[instruction_set] = IsaReplayChild(instruction_set)
        return self._children[instruction_set]

    def close(self) -> None:
        for child in self._children.values():
            child.close()
        self._children.clear()


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The child's loop: one replay per request until stdin closes."""
    from trolly.compute.checkpoints import decode_checkpoint, encode_checkpoint
    from trolly.compute.determinism import apply_profile, current_instruction_set
    from trolly.compute.errors import ComputeError
    from trolly.compute.training import Trainer, train_segment

    datasets: dict[str, Any] = {}
    trainers: dict[tuple, Trainer] = {}
    while True:
        try:
            request = _read(stdin)
        except EOFError:
            return
        try:
            if request["dataset"] is not None:
                datasets[request["dataset_key"]] = request["dataset"]
            dataset = datasets[request["dataset_key"]]
            profile = DeterminismProfile(threads=request["threads"])
            key = (request["spec_key"], request["dataset_key"], profile.threads)
            trainer = trainers.get(key)
            if trainer is None:
                if len(trainers) >= 4:
                    trainers.pop(next(iter(trainers)))
                trainer = trainers[key] = Trainer(dataclasses.replace(request["spec"], determinism=profile), dataset)
            profile_id = apply_profile(trainer.spec.determinism)
            losses: list[float] = []
            state = train_segment(trainer, decode_checkpoint(request["start"]), worker_index=request["worker_index"],
                                  round_index=request["round_index"], end_step=request["end_step"], losses=losses)
            answer = {"ok": True, "end": encode_checkpoint(state), "profile_id": profile_id, "losses": losses,
                      "instruction_set": current_instruction_set()}
        except (ComputeError, KeyError) as error:
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        _write(stdout, answer)


if __name__ == "__main__":
    # stdout carries the protocol: anything printed by libraries goes to stderr instead.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, channel)
