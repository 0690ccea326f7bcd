"""The verifier's Prometheus metrics (docs/operations.md, "Metrics"), in a registry of its own that
`trolly-verifier start` serves (`--metrics-laddr`).

Segments replayed (by what the replay found) and the seconds each replay took; the votes it sent, by verdict;
and its missed reveals: votes whose replay digest it did not reveal before the round's reveal deadline, each of
which costs the validator its verifier fee and a stake penalty (the committee's counterpart of CometBFT's
missed-blocks count).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

DEFAULT_METRICS_ADDRESS = "127.0.0.1:26663"
"""The verifier's default endpoint: after the node's (26660, 26661) and the worker's (26662)."""

REPLAY_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""One segment's replay: at most ten inner steps, from a small model on a CPU to a large one."""


class VerifierMetrics:
    """The verifier's metrics and the registry they are served from (one per service: tests build several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.segments_replayed = Counter("trolly_verifier_segments_replayed", "Training segments replayed, by what "
                                         "the replay found (pass, fail, unavailable, tampered)", ["outcome"],
                                         registry=registry)
        self.replay_seconds = Histogram("trolly_verifier_replay_seconds", "Seconds one segment's check took: its "
                                        "checkpoints fetched and its steps replayed", buckets=REPLAY_SECONDS_BUCKETS,
                                        registry=registry)
        self.votes = Counter("trolly_verifier_votes", "Verdicts sent on chain, by verdict", ["verdict"],
                             registry=registry)
        self.missed_reveals = Counter("trolly_verifier_missed_reveals", "Votes whose replay digest was not revealed "
                                      "before the reveal deadline", registry=registry)
