"""Drawing the segments to verify and the committees that verify them (docs/protocol.md section 4).

The seed is the hash of the block `sampling_delay` blocks after the round closed, which did not exist when
any commitment of the round was made, mixed with the task, the round and the worker. Indices are drawn
without modulo bias: candidate c = x mod n from the first 8 bytes x of
sha256(block_hash || u64(task_id) || u64(round) || worker || u64(counter)), counter = 0, 1, ..., rejected
when x falls in the incomplete last band (x >= n * floor(2^64 / n)) or was already drawn.

Each sampled segment is verified by a committee of validators drawn by power from the same seed, without
replacement (`draw_committee`), so a validator's work stays flat as the network grows; a committee drawn from a
GPU's few replayers is drawn on until it holds more than a third of the power (`beyond_third_of`).
"""

from __future__ import annotations

import hashlib

_SPACE = 1 << 64
COMMITTEE_TAG = b"trolly/committee/v1"


def _uniform(digest_input: bytes, bound: int) -> int | None:
    """A value in [0, bound) from the first 8 bytes of sha256(digest_input), or None in the biased band."""
    x = int.from_bytes(hashlib.sha256(digest_input).digest()[:8], "big")
    return None if x >= bound * (_SPACE // bound) else x % bound


def sample_segments(block_hash: bytes, task_id: int, round_: int, worker: bytes, segments: int, samples: int) -> list[int]:
    """`min(samples, segments)` distinct segment indices in [0, segments), in the order drawn."""
    wanted = min(samples, segments)
    base = block_hash + task_id.to_bytes(8, "big") + round_.to_bytes(8, "big") + worker
    chosen: list[int] = []
    counter = 0
    while len(chosen) < wanted:
        candidate = _uniform(base + counter.to_bytes(8, "big"), segments)
        counter += 1
        if candidate is not None and candidate not in chosen:
            chosen.append(candidate)
    return chosen


def draw_committee(seed: bytes, task_id: int, round_: int, worker: bytes, segment: int, level: int,
                   candidates: list[tuple[bytes, int]], size: int, already: list[bytes] = (),
                   beyond_third_of: int = 0) -> list[bytes]:
    """Operators drawn by power, without replacement, until the committee (starting from `already`) has `size`
    members and holds more than a third of `beyond_third_of` power (0: no such floor), or no candidate is left.
    `candidates` are (operator, power > 0) in ascending operator order; `level` separates draws of one segment.
    Each pick takes t uniform in [0, remaining power) (sha256(tag || seed || u64 task || u64 round || worker ||
    u64 segment || u64 level || u64 counter), no modulo bias) and the candidate whose cumulative power interval
    holds t."""
    committee = list(already)
    powers = dict(candidates)
    drawn_power = sum(powers.get(member, 0) for member in committee)
    pool = [(operator, power) for operator, power in candidates if operator not in committee and power > 0]
    total = sum(power for _, power in pool)  # the pool's power, kept as members leave it
    base = (COMMITTEE_TAG + seed + task_id.to_bytes(8, "big") + round_.to_bytes(8, "big") + worker
            + segment.to_bytes(8, "big") + level.to_bytes(8, "big"))
    counter = 0
    while pool and (len(committee) < size or 3 * drawn_power <= beyond_third_of):
        target = _uniform(base + counter.to_bytes(8, "big"), total)
        counter += 1
        if target is None:
            continue
        for index, (operator, power) in enumerate(pool):
            if target < power:
                committee.append(operator)
                drawn_power += power
                total -= power
                del pool[index]
                break
            target -= power
    return committee
