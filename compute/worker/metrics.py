"""The worker's Prometheus metrics (docs/operations.md, "Metrics"), in a registry of its own that
`trolly-worker start` serves (`--metrics-laddr`).

Rounds trained and the seconds each took, the pace the last round measured, the bytes of the blobs it published
for others to fetch (checkpoints, updates, residuals, final weights), and what it earned: paid per task as its
tasks finish, and the chain's running total for this worker as last read.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DEFAULT_METRICS_ADDRESS = "127.0.0.1:26662"
"""The worker's default endpoint: after the node's CometBFT (26660) and app (26661) ports."""

ROUND_SECONDS_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""A round's training, from a tiny test model's seconds to an hour-long window."""


class WorkerMetrics:
    """The worker's metrics and the registry they are served from (one per service: tests build several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.rounds_trained = Counter("trolly_worker_rounds_trained", "Training rounds this worker trained",
                                      registry=registry)
        self.round_seconds = Histogram("trolly_worker_round_seconds", "Seconds one round's training took, "
                                       "checkpoints and the update's encoding included", buckets=ROUND_SECONDS_BUCKETS,
                                       registry=registry)
        self.samples_per_second = Gauge("trolly_worker_samples_per_second", "Training pace the last round measured",
                                        registry=registry)
        self.bytes_published = Counter("trolly_worker_published_bytes", "Bytes of blobs published for others to fetch: "
                                       "checkpoints, updates, residuals and final weights", registry=registry)
        self.earnings = Counter("trolly_worker_earnings_utrl", "utrl paid to this worker by the tasks it finished "
                                "since it started", registry=registry)
        self.earned = Gauge("trolly_worker_earned_utrl", "utrl this worker earned in all, as the chain last said",
                            registry=registry)

    def round_trained(self, seconds: float, samples: int) -> None:
        self.rounds_trained.inc()
        self.round_seconds.observe(seconds)
        if samples and seconds > 0:
            self.samples_per_second.set(samples / seconds)
