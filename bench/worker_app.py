"""The benchmark's venturi App: a no-op task, timestamping tasks, and a worker entry point.

The benchmark process imports ``build_app`` to enqueue; it starts this file
as a subprocess to drain, so the worker is measured as users run it (its own
process, its own GIL, SIGTERM for a graceful stop)::

    python bench/worker_app.py --database-url URL --prefix bench_v_1a2b3c --concurrency 8
"""

from __future__ import annotations

import argparse
import time
from contextlib import closing
from typing import Any

from workload import NOOP_KIND, RESULT_KIND, STAMP_KIND

import venturi
from venturi.worker import Worker


def noop(n: int) -> None:
    """The unit of work of every throughput figure: nothing, so only the queue is measured."""


def stamp(n: int) -> float:
    """Pickup-latency probe: its return value (the journal note) is when the handler started."""
    return time.time()


def result_probe(n: int) -> float:
    """Result-latency probe (bench/result_bench.py): works 50 ms, so its waiter is already
    waiting, then returns the time it returned at."""
    time.sleep(0.05)
    return time.time()


def build_app(url: str, prefix: str) -> tuple[venturi.App, Any, Any]:
    """An App on ``prefix`` with the benchmark tasks; returns (app, noop, stamp).

    ``bench.result_probe`` is registered too (``app.tasks()[RESULT_KIND]``).
    """
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    app.task(kind=RESULT_KIND)(result_probe)
    return app, app.task(kind=NOOP_KIND)(noop), app.task(kind=STAMP_KIND)(stamp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    app, _, _ = build_app(args.database_url, args.prefix)
    with closing(app):
        Worker(app, concurrency=args.concurrency, grace=5.0).run()


if __name__ == "__main__":
    main()
