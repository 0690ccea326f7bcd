"""Drawing the segments to verify (docs/protocol.md section 4).

The seed is the hash of the block `sampling_delay` blocks after the round closed, which did not exist when
any commitment of the round was made, mixed with the task, the round and the worker. Indices are drawn
without modulo bias: candidate c = x mod n from the first 8 bytes x of
sha256(block_hash || u64(task_id) || u64(round) || worker || u64(counter)), counter = 0, 1, ..., rejected
when x falls in the incomplete last band (x >= n * floor(2^64 / n)) or was already drawn.
"""

from __future__ import annotations

import hashlib

_SPACE = 1 << 64


def sample_segments(block_hash: bytes, task_id: int, round_: int, worker: bytes, segments: int, samples: int) -> list[int]:
    """`min(samples, segments)` distinct segment indices in [0, segments), in the order drawn."""
    wanted = min(samples, segments)
    limit = segments * (_SPACE // segments)
    base = block_hash + task_id.to_bytes(8, "big") + round_.to_bytes(8, "big") + worker
    chosen: list[int] = []
    counter = 0
    while len(chosen) < wanted:
        x = int.from_bytes(hashlib.sha256(base + counter.to_bytes(8, "big")).digest()[:8], "big")
        counter += 1
        if x >= limit:
            continue
        candidate = x % segments
        if candidate not in chosen:
            chosen.append(candidate)
    return chosen
