"""What limits across workers cost (ADR 0128): one run, the same server, side by side.

For each variant (no limit; ``global_concurrency`` far above what is reached;
``rate_limit`` far above what is reached) on one fresh prefix:

- **claim**: ``--claims`` claims of 8 from a backlog, alternating the variants
  claim by claim (lockstep), each claim's clock running only during its turn;
  the median per claim, and the difference to the unlimited claim.
- **drain**: ``--jobs`` no-op jobs drained by one in-process ``Worker``
  (concurrency 8), timed by the database (first to last ``completed`` journal
  entry), best of ``--rounds``.

    python bench/limits.py [--database-url URL] [--claims 2000] [--jobs 5000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

import psycopg
from workload import drop_prefix

import venturi
from venturi.runtime.runner import Runner
from venturi.types import Finished, Outcome, OutcomeKind
from venturi.worker import Worker

VARIANTS = {
    "none": {},
    "global_concurrency=10000": {"global_concurrency": 10_000},
    "rate_limit=1000000/s": {"rate_limit": "1000000/s"},
}
LEASE = timedelta(minutes=5)


def noop(n: int) -> None:
    """Nothing, so only the queue is measured."""


def _kind(name: str) -> str:
    return "bench." + name.split("=", maxsplit=1)[0]


def build(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    tasks = {
        name: app.task(kind=_kind(name), **options)(noop) for name, options in VARIANTS.items()
    }
    return app, tasks


def claims(app: venturi.App, url: str, tasks: dict[str, Any], count: int) -> dict[str, float]:
    """Median ms per claim of 8, per variant, measured in lockstep; each batch is
    completed outside the clock, so claimed rows stay as few as in a worker."""
    for task in tasks.values():
        task.delay_many([{"n": n} for n in range(count * 8)])
    backend = app.backend
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ANALYZE {app.prefix}_jobs")
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


def drain(app: venturi.App, url: str, prefix: str, task: Any, jobs: int) -> float:
    """Jobs per second of one Worker (concurrency 8) serving only this task's kind."""
    task.delay_many([{"n": n} for n in range(jobs)])
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
        conn.execute(f"TRUNCATE {prefix}_journal, {prefix}_jobs")
    assert row is not None
    return jobs / float(row[0])


def measure(url: str, claim_count: int, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    """Per variant: median ms per claim of 8 (lockstep) and the best drain of ``rounds``."""
    prefix = f"bench_l_{secrets.token_hex(3)}"
    app, tasks = build(url, prefix)
    app.migrate()
    try:
        per_claim = claims(app, url, tasks, claim_count)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {prefix}_journal, {prefix}_jobs")
        rates: dict[str, list[float]] = {name: [] for name in tasks}
        for _ in range(rounds):
            for name, task in tasks.items():
                rates[name].append(drain(app, url, prefix, task, jobs))
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return {
        name: {"ms_per_claim": per_claim[name], "drain_jobs_per_s": max(rates[name])}
        for name in tasks
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("VENTURI_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    result = measure(args.database_url, args.claims, args.jobs, args.rounds)
    base = result["none"]["ms_per_claim"]
    sys.stdout.write(f"{'variant':<28} {'ms/claim of 8':>14} {'+ms':>7} {'drain jobs/s':>13}\n")
    for name, figures in result.items():
        sys.stdout.write(
            f"{name:<28} {figures['ms_per_claim']:>14.3f} {figures['ms_per_claim'] - base:>7.3f}"
            f" {figures['drain_jobs_per_s']:>13,.0f}\n"
        )


if __name__ == "__main__":
    main()
