"""What fair claims cost (ADR 0129): one run, the same server, side by side.

Variants on one fresh prefix: a kind without ``fair_key`` (the baseline), and the same
no-op handler with ``fair_key`` over 2 keys and over 1,000 keys.

- **claim**: ``--claims`` claims of 8 from a backlog, the variants alternating claim by
  claim (lockstep), each claim's clock running only during its turn; the median per
  claim, and the difference to the plain claim.
- **drain**: ``--jobs`` no-op jobs drained by one in-process ``Worker`` (concurrency 8),
  timed by the database (first to last ``completed`` journal entry), best of ``--rounds``.

``measure(url, claims=..., jobs=..., rounds=...)`` returns the figures (for bench/run.py);
``python bench/fair_bench.py [--database-url URL] [--claims 1000] [--jobs 5000] [--rounds 2]``
prints them.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from workload import drop_prefix

import venturi
from venturi.runtime.runner import Runner
from venturi.types import Finished, Outcome, OutcomeKind
from venturi.worker import Worker

#: Variant name -> how many fair keys its jobs spread over (None: no fair_key declared).
VARIANTS: dict[str, int | None] = {"plain": None, "fair, 2 keys": 2, "fair, 1,000 keys": 1000}


@dataclass(frozen=True)
class Figures:
    """Per variant: median ms per claim of 8, and the best drain rate (jobs/s)."""

    ms_per_claim: dict[str, float]
    drain_jobs_per_second: dict[str, float]


def noop(tenant: str, n: int) -> None:
    """Nothing, so only the queue is measured."""


def _kind(name: str) -> str:
    return "bench." + "".join(c for c in name if c.isalnum())


def _build(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    tasks = {
        name: app.task(kind=_kind(name), fair_key=lambda tenant, **_: tenant)(noop)
        if keys is not None
        else app.task(kind=_kind(name))(noop)
        for name, keys in VARIANTS.items()
    }
    return app, tasks


def _enqueue(task: Any, name: str, count: int) -> None:
    keys = VARIANTS[name] or 1
    task.delay_many([(f"tenant-{n % keys}", n) for n in range(count)])


def _claims(app: venturi.App, url: str, tasks: dict[str, Any], count: int) -> dict[str, float]:
    """Median ms per claim of 8 per variant, in lockstep; each batch is completed outside
    the clock, so claimed rows stay as few as in a worker."""
    for name, task in tasks.items():
        _enqueue(task, name, count * 8)
    backend = app.backend
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {app.prefix}_jobs")
    runners = {
        name: Runner(backend, {t.kind: t for t in tasks.values()}, kinds=[t.kind], worker_id="b:1")
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
    return {name: statistics.median(values) for name, values in timings.items()}


def _drain(app: venturi.App, url: str, task: Any, name: str, jobs: int) -> float:
    """Jobs per second of one Worker (concurrency 8) serving only this task's kind."""
    prefix = app.prefix
    _enqueue(task, name, jobs)
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
        conn.execute(f"TRUNCATE {prefix}_journal, {prefix}_jobs, {prefix}_fair_cursors")
    assert row is not None
    return jobs / float(row[0])


def measure(url: str, *, claims: int = 1000, jobs: int = 5000, rounds: int = 2) -> Figures:
    """Claim cost and drain rate of every variant, on a fresh prefix dropped afterwards."""
    prefix = f"bench_f_{secrets.token_hex(3)}"
    app, tasks = _build(url, prefix)
    app.migrate()
    try:
        per_claim = _claims(app, url, tasks, claims)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {prefix}_journal, {prefix}_jobs, {prefix}_fair_cursors")
        rates: dict[str, list[float]] = {name: [] for name in tasks}
        for _ in range(rounds):
            for name, task in tasks.items():
                rates[name].append(_drain(app, url, task, name, jobs))
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return Figures(per_claim, {name: max(values) for name, values in rates.items()})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("VENTURI_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    figures = measure(args.database_url, claims=args.claims, jobs=args.jobs, rounds=args.rounds)
    base = figures.ms_per_claim["plain"]
    sys.stdout.write(f"{'variant':<20} {'ms/claim of 8':>14} {'+ms':>7} {'drain jobs/s':>13}\n")
    for name in VARIANTS:
        ms = figures.ms_per_claim[name]
        rate = figures.drain_jobs_per_second[name]
        sys.stdout.write(f"{name:<20} {ms:>14.3f} {ms - base:>7.3f} {rate:>13,.0f}\n")


if __name__ == "__main__":
    main()
