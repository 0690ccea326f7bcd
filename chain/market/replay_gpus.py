"""Which GPUs each validator's verifier replays, and the committees of a GPU-trained commitment drawn from those.

A segment trained on a GPU replays bit for bit only on the same GPU model, driver and CUDA build (the GPU part of
its determinism profile, `gpu-<model>+driver-<version>+cuda-<version>`, docs/protocol.md 2a); any other verifier
can only replay its CPU part and judge it within a tolerance. So a validator's operator declares the GPU parts its
verifier replays (`MsgDeclareReplayGpus`, stored under `keys.market_replay_gpus_key`), and a commitment whose
profile names a GPU part is verified by a committee drawn, by power as always, only from the validators that
declared it (`capable_candidates`). A CPU profile's committee is drawn from every validator, as before. Which GPU
profiles a commitment may name, given who declared them, is `market.profiles`' rule; a dispute on a GPU segment
goes to the whole validator set (`market.tally`).
"""

from __future__ import annotations

import json
import re

from .. import keys
from ..codec import canonical_json
from ..state import State
from .errors import InvalidReplayGpus

MAX_REPLAY_GPUS = 8
"""Most GPU parts one validator declares."""

MAX_GPU_PART_BYTES = 128
"""Longest GPU part (a determinism profile is at most `max_profile_bytes`, 128)."""

_GPU_PART = re.compile(r"gpu-[A-Za-z0-9.-]+\+driver-[A-Za-z0-9.-]+\+cuda-[A-Za-z0-9.-]+")


def check_gpu_parts(gpus: list[str]) -> None:
    """Raise InvalidReplayGpus unless `gpus` is a list a validator may declare."""
    if len(gpus) > MAX_REPLAY_GPUS:
        raise InvalidReplayGpus(f"at most {MAX_REPLAY_GPUS} GPUs, got {len(gpus)}")
    if len(set(gpus)) != len(gpus):
        raise InvalidReplayGpus("a GPU is named twice")
    for gpu in gpus:
        if len(gpu.encode()) > MAX_GPU_PART_BYTES or not _GPU_PART.fullmatch(gpu):
            raise InvalidReplayGpus(f"{gpu[:MAX_GPU_PART_BYTES]!r} is not a GPU profile part (gpu-<model>+driver-"
                                    f"<version>+cuda-<version>, at most {MAX_GPU_PART_BYTES} bytes)")


def gpu_part_of(profile: str) -> str | None:
    """The GPU part of a determinism profile id (`torch-<v>/threads-<n>/isa-<set>/<gpu part>/<mode>`), None for a
    CPU profile."""
    parts = profile.split("/")
    return parts[3] if len(parts) == 5 and _GPU_PART.fullmatch(parts[3]) else None


def set_replay_gpus(state: State, operator: bytes, gpus: list[str]) -> None:
    key = keys.market_replay_gpus_key(operator)
    if gpus:
        state.set(key, canonical_json(sorted(gpus)))
    else:
        state.delete(key)


def get_replay_gpus(state: State, operator: bytes) -> list[str]:
    raw = state.get(keys.market_replay_gpus_key(operator))
    return json.loads(raw) if raw is not None else []


def declared_replay_gpus(state: State) -> list[tuple[bytes, list[str]]]:
    """(operator, GPU parts) of every validator that declared some, by operator."""
    prefix = keys.MARKET_REPLAY_GPUS
    return [(key[len(prefix):], json.loads(raw)) for key, raw in state.iterate(prefix)]


def capable_candidates(state: State, candidates: list[tuple[bytes, int]], profile: str) -> list[tuple[bytes, int]]:
    """The committee candidates (operator, power) that can replay a commitment of determinism `profile`: all of
    them for a CPU profile, those that declared its GPU part for a GPU one."""
    gpu = gpu_part_of(profile)
    if gpu is None:
        return candidates
    return [(operator, power) for operator, power in candidates if gpu in get_replay_gpus(state, operator)]
