"""Prometheus metrics (SPEC 5.6, ADR 0127); needs ``venturi[prometheus]``.

Two collectors, because they answer different questions at different costs:

- ``RunMetrics(app)`` counts what this process sees through ``app.events``:
  enqueues, merges and run outcomes per kind, run durations and pickup latency
  (histograms), runs in flight per worker, recovered and released jobs. Free
  to scrape (no query). ``venturi worker --metrics-port N`` serves it.
- ``QueueMetrics(app)`` reads the queue from ``app.stats()``: jobs per kind and
  status, scheduled ones, and the oldest eligible age. One stats query per
  ``min_interval`` at most, however often and by whom it is scraped, and
  never one per kind. Run it once per prefix (``venturi metrics --port N``),
  not in every worker.

Pickup latency is observed for first runs only, from the row's ``created_at``
(database clock) to the claim (this host's clock): a later run's wait is its
backoff, not the queue's. A countdown's delay is part of it.

Only this module imports ``prometheus_client``; ``import venturi`` never does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import venturi
from venturi import App, Status
from venturi.events import (
    Event,
    JobClaimed,
    JobEnqueued,
    JobMerged,
    JobsRecovered,
    JobsReleased,
    RunEnded,
    RunStarted,
    Subscription,
)

__all__ = ["DURATION_BUCKETS", "QueueMetrics", "RunMetrics"]

#: Run durations and pickup latencies, seconds: 1 ms to 10 min.
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    600.0,
)


class RunMetrics:
    """Counters and histograms fed by ``app.events``; ``close()`` unsubscribes."""

    def __init__(self, app: App, *, registry: CollectorRegistry = REGISTRY) -> None:
        self.enqueued = Counter(
            "venturi_jobs_enqueued", "Jobs written by enqueues.", ["kind"], registry=registry
        )
        self.merged = Counter(
            "venturi_jobs_merged",
            "Enqueues folded into a pending sibling (dedup).",
            ["kind"],
            registry=registry,
        )
        self.runs = Counter(
            "venturi_runs", "Runs ended, by outcome.", ["kind", "outcome"], registry=registry
        )
        self.duration = Histogram(
            "venturi_run_duration_seconds",
            "How long handlers ran.",
            ["kind"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.pickup = Histogram(
            "venturi_pickup_latency_seconds",
            "From a job's creation to its first claim.",
            ["kind"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "venturi_runs_in_flight", "Handlers running now.", ["worker"], registry=registry
        )
        self.recovered = Counter(
            "venturi_jobs_recovered", "Jobs whose expired lease was recovered.", registry=registry
        )
        self.released = Counter(
            "venturi_jobs_released",
            "Unfinished jobs given back by a stopping worker.",
            ["worker"],
            registry=registry,
        )
        self._subscription: Subscription = app.events.subscribe(self._observe)

    def close(self) -> None:
        self._subscription.unsubscribe()

    def _observe(self, event: Event) -> None:
        if isinstance(event, RunEnded):
            self.runs.labels(event.kind, event.outcome.value).inc()
            self.duration.labels(event.kind).observe(event.duration)
            self.in_flight.labels(event.worker_id).dec()
        elif isinstance(event, RunStarted):
            self.in_flight.labels(event.worker_id).inc()
        elif isinstance(event, JobClaimed):
            if event.run == 1:
                waited = event.at - event.created_at.timestamp()
                self.pickup.labels(event.kind).observe(max(waited, 0.0))
        elif isinstance(event, JobEnqueued):
            self.enqueued.labels(event.kind).inc()
        elif isinstance(event, JobMerged):
            self.merged.labels(event.kind).inc()
        elif isinstance(event, JobsRecovered):
            self.recovered.inc(event.count)
        elif isinstance(event, JobsReleased):
            self.released.labels(event.worker_id).inc(event.count)


class QueueMetrics(Collector):
    """Queue gauges from ``app.stats()``, cached for ``min_interval`` seconds.

    Registered on ``registry`` at construction. A scrape during an outage
    raises, so the scrape fails (``up`` = 0) instead of showing stale depths.
    """

    def __init__(
        self,
        app: App,
        *,
        min_interval: float = 15.0,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self._app = app
        self._min_interval = min_interval
        self._lock = threading.Lock()
        self._stats: venturi.types.Stats | None = None
        self._read_at = 0.0
        #: How many stats queries were made (tests and curious operators).
        self.queries = 0
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        """No metric up front: registering must not query the database."""
        return ()

    def collect(self) -> Iterator[Metric]:
        stats = self._current()
        jobs = GaugeMetricFamily(
            "venturi_queue_jobs", "Jobs per kind and status.", labels=["kind", "status"]
        )
        scheduled = GaugeMetricFamily(
            "venturi_queue_scheduled_jobs",
            "Pending jobs not eligible yet (countdown, backoff, pause).",
            labels=["kind"],
        )
        oldest = GaugeMetricFamily(
            "venturi_queue_oldest_eligible_age_seconds",
            "Age of the oldest eligible pending job (0: none waiting).",
            labels=["kind"],
        )
        for kind in stats.kinds:
            for status in Status:
                jobs.add_metric([kind.kind, status.value], kind.counts.get(status, 0))
            scheduled.add_metric([kind.kind], kind.scheduled)
            age = kind.oldest_eligible_age
            oldest.add_metric([kind.kind], age.total_seconds() if age is not None else 0.0)
        yield jobs
        yield scheduled
        yield oldest

    def _current(self) -> venturi.types.Stats:
        with self._lock:
            now = time.monotonic()
            if self._stats is None or now - self._read_at >= self._min_interval:
                self._stats = self._app.stats()
                self._read_at = now
                self.queries += 1
            return self._stats
