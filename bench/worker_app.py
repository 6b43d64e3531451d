"""The benchmark's venturi App: no-op tasks (sync and async), timestamping tasks, a worker.

The benchmark process imports ``build_app`` to enqueue; it starts this file
as a subprocess to drain, so the worker is measured as users run it (its own
process, its own GIL, SIGTERM for a graceful stop)::

    python bench/worker_app.py --database-url URL --prefix bench_v_1a2b3c --concurrency 8
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from contextlib import closing
from typing import Any

from workload import ASYNC_NOOP_KIND, NOOP_KIND, RESULT_KIND, STAMP_KIND

import venturi
from venturi.worker import Worker


def noop(n: int) -> None:
    """The unit of work of every throughput figure: nothing, so only the queue is measured."""


async def anoop(n: int) -> None:
    """``noop`` as an ``async def`` handler: the async drain measures the event loop's path."""


def stamp(n: int) -> float:
    """Pickup-latency probe: its return value (the journal note) is when the handler started."""
    return time.time()


def result_probe(n: int) -> float:
    """Result-latency probe (bench/result_bench.py): works 50 ms, so its waiter is already
    waiting, then returns the time it returned at."""
    time.sleep(0.05)
    return time.time()


class FinishCounter:
    """Counts the outcomes ``backend.finish`` records, by wrapping it on ``backend``;
    ``done`` is set once ``jobs`` of them are (a drain's end, seen from the worker)."""

    def __init__(self, backend: Any, jobs: int) -> None:
        self.recorded = 0
        self.done = threading.Event()
        finish = backend.finish

        def counted(finished: Any) -> Any:
            written = finish(finished)
            self.recorded += len(finished)
            if self.recorded >= jobs:
                self.done.set()
            return written

        backend.finish = counted


def build_app(
    url: str, prefix: str, *, direct_url: str | None = None
) -> tuple[venturi.App, Any, Any, Any]:
    """An App on ``prefix`` with the benchmark tasks; returns (app, noop, stamp, anoop).

    ``bench.result_probe`` is registered too (``app.tasks()[RESULT_KIND]``);
    ``direct_url``: ``url`` is PgBouncer in transaction mode (ADR 0123).
    """
    app = venturi.App(url, prefix=prefix, direct_url=direct_url, set_as_current=False)
    app.task(kind=RESULT_KIND)(result_probe)
    return (
        app,
        app.task(kind=NOOP_KIND)(noop),
        app.task(kind=STAMP_KIND)(stamp),
        app.task(kind=ASYNC_NOOP_KIND)(anoop),
    )


def observe(app: venturi.App) -> None:
    """Tracing and metrics as a user would run them: spans to a batch processor whose
    exporter drops them (no collector to wait on), run metrics in the default registry."""
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from venturi.contrib.otel import instrument
    from venturi.contrib.prometheus import RunMetrics

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    instrument(app, tracer_provider=provider)
    RunMetrics(app)


def time_claims(app: venturi.App, into: list[tuple[float, float, int]]) -> None:
    """Record every claim of this worker as (wall-clock end, seconds, jobs claimed): the
    offered-load bench's claim latency (``offered_load.py``), read from the worker's side."""
    backend = app.backend
    claim = backend.claim

    def timed(**options: Any) -> Any:
        started = time.perf_counter()
        jobs = claim(**options)
        into.append((time.time(), time.perf_counter() - started, len(jobs)))
        return jobs

    backend.claim = timed  # type: ignore[method-assign]


def time_wakes(into: list[float]) -> None:
    """Record when each of this process's claim loops returned from its idle wait woken
    (a NOTIFY, a handler ending, stop), wall clock: the pickup bench's split of the time
    before the claim into the enqueue's commit and notification, and the wake-up's own."""
    from venturi.runtime.waiting import Waiter

    wait = Waiter.wait

    def timed(self: Waiter, timeout: float) -> bool:
        is_woken = wait(self, timeout)
        if is_woken:
            into.append(time.time())
        return is_woken

    Waiter.wait = timed  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--direct-url", help="the server itself, when --database-url is PgBouncer")
    parser.add_argument(
        "--observe", action="store_true", help="OTel spans and Prometheus metrics on (ADR 0127)"
    )
    parser.add_argument(
        "--claim-timings", help="write every claim's (end time, seconds, jobs) as JSON here"
    )
    parser.add_argument(
        "--wake-timings", help="write the wall-clock time of every woken idle wait as JSON here"
    )
    args = parser.parse_args()
    app, *_ = build_app(args.database_url, args.prefix, direct_url=args.direct_url)
    if args.observe:
        observe(app)
    claims: list[tuple[float, float, int]] = []
    if args.claim_timings:
        time_claims(app, claims)
    wakes: list[float] = []
    if args.wake_timings:
        time_wakes(wakes)
    with closing(app):
        Worker(app, concurrency=args.concurrency, grace=5.0).run()
    if args.claim_timings:
        with open(args.claim_timings, "w", encoding="ascii") as output:
            json.dump(claims, output)
    if args.wake_timings:
        with open(args.wake_timings, "w", encoding="ascii") as output:
            json.dump(wakes, output)


if __name__ == "__main__":
    main()
