"""What a vote commits to, so a verifier that votes without replaying is found out (docs/protocol.md 4.4b).

The replay digest is sha256 over the per-step training losses the replay computed, as float32 little-endian,
in step order: the worker publishes checkpoints, never losses, so only a replay of the segment yields them.
A segment judged without a replay (its checkpoints were not served, or a check before the replay refused it)
has a digest of its outcome alone; honest verifiers reach the same one. The vote carries
sha256(tag || operator || salt || digest) (`trolly.chain.market.reveals.replay_commitment`); the salt is random
and kept in the vote record until the reveal, so nobody can test guesses against the commitment.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import Sequence

from trolly.chain.market.reveals import replay_commitment

LOSSES_TAG = b"trolly/replay-losses/v1"
NO_REPLAY_TAG = b"trolly/no-replay/v1/"
DETAIL = "replay_digest"
"""The key of a report's details that holds the losses digest (hex) when a replay ran."""


def losses_digest(losses: Sequence[float]) -> bytes:
    """sha256(tag || each loss as float32 little-endian): the replay digest of a segment that was replayed."""
    return hashlib.sha256(LOSSES_TAG + b"".join(struct.pack("<f", loss) for loss in losses)).digest()


def replay_digest(report) -> bytes:
    """The digest a vote on `report` commits to: the replayed losses' digest, else that of the outcome."""
    found = dict(report.details).get(DETAIL)
    if found:
        return bytes.fromhex(found)
    return hashlib.sha256(NO_REPLAY_TAG + report.outcome.encode()).digest()


def new_salt() -> bytes:
    return os.urandom(32)


def commitment(operator: bytes, salt: bytes, digest: bytes) -> bytes:
    return replay_commitment(operator, salt, digest)
