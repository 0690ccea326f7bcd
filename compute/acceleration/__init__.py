"""What makes a worker's rounds fast, apart from what they compute: none of it changes a byte.

The protocol's core (`compute.training`, `checkpoints`, `canonical`...) is what a verifier replays; this
subpackage only speeds a worker's rounds up, behind the core's own interfaces (`training.RoundAcceleration`,
`training.SnapshotTaker`), and the tests train with each part on and off and compare the bytes:

    worker_acceleration      `Acceleration`, the bundle a worker builds once where it starts and hands to its
                             rounds, and its `AccelerationOptions` (worker.json, `trolly-worker start` flags)
    batches_ahead            a thread draws a round's batches ahead of the training thread
    affinity                 the training thread alone on one CPU, everything beside it on the others
    state_arena              the trainer's weights and AdamW state moved into one shared memory file
    checkpoint_process       a helper process copies, hashes and stores checkpoints from that arena
    checkpoint_process_main  that process's own code (standard library and the blob store only)

Nothing of the verifier imports it (tests/project/test_module_graph.py). This file imports its two names on first
use only, so that starting the checkpoint process (`python -m trolly.compute.acceleration.checkpoint_process_main`)
loads no torch.
"""

from __future__ import annotations

import importlib

_LAZY = {"Acceleration": ".worker_acceleration", "AccelerationOptions": ".worker_acceleration"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Acceleration", "AccelerationOptions"]
