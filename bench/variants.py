"""Claim cost and drain rate of task variants of one App, side by side: the shared
measurements of ``limits.py`` (limits across workers) and ``fair_bench.py`` (fair claims)."""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from workload import database_url, drop_prefix

import venturi
from venturi.runtime.runner import Runner
from venturi.types import Finished, Outcome, OutcomeKind
from venturi.worker import Worker

#: Writes ``count`` jobs of the variant ``name`` (its task given).
Enqueue = Callable[[str, Any, int], None]
#: An App on the prefix given, and its task per variant name.
Build = Callable[[str, str], tuple[venturi.App, dict[str, Any]]]


def measure(
    url: str, build: Build, enqueue: Enqueue, *, claims: int, jobs: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Per variant: the median ms per claim of 8 (lockstep) and the best drain rate of
    ``rounds``, on a fresh prefix dropped afterwards."""
    prefix = f"bench_x_{secrets.token_hex(3)}"
    app, tasks = build(url, prefix)
    app.migrate()
    try:
        per_claim = claim_cost(app, url, tasks, claims, enqueue)
        rates: dict[str, list[float]] = {name: [] for name in tasks}
        for _ in range(rounds):
            for name, task in tasks.items():
                rates[name].append(drain_rate(app, url, name, task, jobs, enqueue))
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return per_claim, {name: max(values) for name, values in rates.items()}


def claim_cost(
    app: venturi.App, url: str, tasks: Mapping[str, Any], count: int, enqueue: Enqueue
) -> dict[str, float]:
    """Median ms per claim of 8 per variant, in lockstep; each batch is completed outside
    the clock, so claimed rows stay as few as in a worker."""
    for name, task in tasks.items():
        enqueue(name, task, count * 8)
    backend = app.backend
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {app.prefix}_jobs")
    runners = {
        name: Runner(
            backend,
            {t.kind: t for t in tasks.values()},
            kinds=[t.kind],
            worker_id="b:1",
            result_max_bytes=app.result_max_bytes,
        )
        for name, t in tasks.items()
    }
    timings: dict[str, list[float]] = {name: [] for name in tasks}
    for _ in range(count):
        for name, runner in runners.items():
            request = runner.plan.request(free=8, running={}, is_renewed=True)
            assert request is not None
            started = time.perf_counter()
            jobs = runner.claim(request)
            timings[name].append((time.perf_counter() - started) * 1000)
            assert len(jobs) == 8, (name, len(jobs))
            backend.finish([Finished(job.claim, Outcome(OutcomeKind.COMPLETED)) for job in jobs])
    empty(url, app.prefix)
    return {name: statistics.median(values) for name, values in timings.items()}


def drain_rate(
    app: venturi.App, url: str, name: str, task: Any, jobs: int, enqueue: Enqueue
) -> float:
    """Jobs per second of one Worker (concurrency 8) serving only this task's kind."""
    prefix = app.prefix
    enqueue(name, task, jobs)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ANALYZE {prefix}_jobs")
        worker = Worker(app, concurrency=8, kinds=[task.kind], poll_interval=0.5)
        worker.start()
        try:
            while True:
                row = conn.execute(
                    f"SELECT count(*) FROM {prefix}_jobs WHERE kind = %s AND status <> 'completed'",
                    (task.kind,),
                ).fetchone()
                if row is not None and row[0] == 0:
                    break
                time.sleep(0.1)
        finally:
            worker.stop()
        row = conn.execute(
            f"SELECT extract(epoch FROM max(recorded_at) - min(recorded_at)) FROM {prefix}_journal"
            " WHERE kind = %s AND outcome = 'completed'",
            (task.kind,),
        ).fetchone()
    empty(url, prefix)
    assert row is not None
    return jobs / float(row[0])


def empty(url: str, prefix: str) -> None:
    """Every job, journal entry and fair-claim cursor of ``prefix`` gone."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"TRUNCATE {prefix}_journal, {prefix}_jobs, {prefix}_fair_cursors,"
            f" {prefix}_checkpoints, {prefix}_events"
        )


def options(description: str, *, claims: int) -> argparse.Namespace:
    """The command line of a variants script: --database-url, --claims, --jobs, --rounds."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--claims", type=int, default=claims)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.database_url = database_url(args.database_url)
    return args


def print_table(
    per_claim: Mapping[str, float], rates: Mapping[str, float], *, baseline: str
) -> None:
    """One line per variant: ms per claim of 8, its excess over ``baseline``'s, drain rate."""
    width = max(len(name) for name in per_claim) + 2
    base = per_claim[baseline]
    sys.stdout.write(
        f"{'variant':<{width}} {'ms/claim of 8':>14} {'+ms':>7} {'drain jobs/s':>13}\n"
    )
    for name, ms in per_claim.items():
        sys.stdout.write(f"{name:<{width}} {ms:>14.3f} {ms - base:>7.3f} {rates[name]:>13,.0f}\n")
