"""What observability costs (ADR 0127): the c=8 drain with OTel and Prometheus on, beside it
off, in one run, and the enqueue path's cost when nobody subscribes.

    python bench/observability.py [--jobs 20000] [--rounds 3] [--database-url URL]

Drains alternate off/on, each on a fresh prefix, timed by the database (the
span of the ``completed`` journal entries, like bench/run.py); the best round
of each is kept. "On" is ``worker_app.py --observe``: a consumer span per run
(BatchSpanProcessor, a discarding exporter) and ``RunMetrics``; the jobs are
enqueued instrumented too, so each run's span has its enqueue's parent.

The no-subscriber figure times ``Task.delay_many``'s validation and write path
against an in-memory enqueuer (no I/O), with ``app.events`` inactive, beside
the same jobs built by ``new_job`` and handed to the enqueuer directly: the
difference is what the emitting places cost when nobody listens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from venturi_bench import Prefix, _drain_once
from workload import database_url

import venturi
from venturi.contrib.otel import instrument
from venturi.refs import JobRef
from venturi.types import NewJob

RESULTS = Path(__file__).parent / "results"


class NullEnqueuer:
    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        return [JobRef(job.id) for job in jobs]


def drains(url: str, jobs: int, rounds: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for n in range(rounds):
        for mode in ("off", "on") if n % 2 == 0 else ("on", "off"):
            prefix = Prefix(url)
            try:
                if mode == "on":
                    instrument(prefix.app, tracer_provider=TracerProvider())
                options = ["--observe"] if mode == "on" else []
                result = _drain_once(prefix, jobs, 8, RESULTS, options=options)
            finally:
                prefix.close()
            rates[mode].append(result["jobs_per_s"])
            print(f"round {n + 1} {mode}: {result['jobs_per_s']:,.0f} jobs/s", file=sys.stderr)
    return rates


def idle_cost(calls: int) -> dict[str, float]:
    """ns per job: the enqueue path with inactive events vs the enqueuer called directly."""
    app = venturi.App("postgresql://unused/x", prefix="bench_idle", set_as_current=False)

    @app.task(kind="bench.idle")
    def idle(n: int) -> None: ...

    sink = NullEnqueuer()
    idle.enqueuer = lambda: sink  # type: ignore[method-assign]
    assert not app.events.active
    items = [[n] for n in range(calls)]
    best_path = best_direct = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for item in items:
            idle._write([idle.new_job(item)], None)
        best_path = min(best_path, time.perf_counter() - started)
        started = time.perf_counter()
        for item in items:
            sink.enqueue([idle.new_job(item)])
        best_direct = min(best_direct, time.perf_counter() - started)
    return {
        "path_ns": best_path / calls * 1e9,
        "direct_ns": best_direct / calls * 1e9,
        "overhead_ns": (best_path - best_direct) / calls * 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    idle = idle_cost(50_000)
    rates = drains(database_url(args.database_url), args.jobs, args.rounds)
    off, on = max(rates["off"]), max(rates["on"])
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS / f"observability-{stamp}.json").write_text(
        json.dumps({"rates": rates, "idle": idle}, indent=2)
    )
    print("| figure | off | on | ratio on/off |")
    print("| --- | --- | --- | --- |")
    print(
        f"| drain c=8, {args.jobs:,} no-op jobs | {off:,.0f} jobs/s | {on:,.0f} jobs/s | "
        f"{on / off:.2f} |"
    )
    print(
        f"| .delay() path, no subscriber | {idle['direct_ns']:,.0f} ns (enqueuer direct) | "
        f"{idle['path_ns']:,.0f} ns (through the events check) | "
        f"+{idle['overhead_ns']:,.0f} ns/call |"
    )


if __name__ == "__main__":
    main()
