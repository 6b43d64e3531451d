"""What limits per key cost (ADR 0138): one run, the same server, side by side.

Variants on one fresh prefix: a plain kind (the baseline) and the same no-op handler
with ``concurrency_key=`` over 1, 100 and 10,000 keys at ``key_concurrency`` 1 and 4.

- **drain**: ``--jobs`` no-op jobs drained by one in-process ``Worker``
  (concurrency 8), timed by the database (first to last ``completed`` journal
  entry), one variant after another, best of ``--rounds``.
- **claim**: ``--claims`` claims of 8 from a backlog of every variant, the
  variants alternating claim by claim (lockstep); the claim's time over the jobs
  it took, per job, p50 and p99 (each batch completed outside the clock).

``--unused`` measures only what the feature's presence costs when unused: the
time per ``.delay()`` and a plain drain, for running under this tree and under
another (``PYTHONPATH=<tree> python bench/key_limits.py --unused``), alternately.

    python bench/key_limits.py [--database-url URL] [--claims 300] [--jobs 10000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from typing import Any

import psycopg
import variants
from workload import database_url, drop_prefix

import venturi
from venturi.runtime.runner import Runner
from venturi.types import Finished, Outcome, OutcomeKind

#: Variant name -> (keys, key_concurrency); (None, None): no key declared.
VARIANTS: dict[str, tuple[int | None, int | None]] = {
    "plain": (None, None),
    "1 key, N=1": (1, 1),
    "100 keys, N=1": (100, 1),
    "10,000 keys, N=1": (10_000, 1),
    "1 key, N=4": (1, 4),
    "100 keys, N=4": (100, 4),
    "10,000 keys, N=4": (10_000, 4),
}


def noop(tenant: str, n: int) -> None:
    """Nothing, so only the queue is measured."""


def _kind(name: str) -> str:
    return "bench.k" + "".join(c for c in name if c.isalnum())


def _build(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    tasks: dict[str, Any] = {}
    for name, (keys, per_key) in VARIANTS.items():
        options: dict[str, Any] = {}
        if keys is not None:
            options = {"concurrency_key": lambda tenant, **_: tenant, "key_concurrency": per_key}
        tasks[name] = app.task(kind=_kind(name), **options)(noop)
    return app, tasks


def _enqueue(name: str, task: Any, count: int) -> None:
    keys = VARIANTS[name][0] or 1
    task.delay_many([(f"t{n % keys}", n) for n in range(count)])


def claim_cost(app: venturi.App, url: str, tasks: dict[str, Any], count: int) -> dict[str, Any]:
    """Per variant: ms per claimed job (claim time / jobs taken), p50 and p99, and the
    jobs a claim of 8 took on average."""
    for name, task in tasks.items():
        _enqueue(name, task, count * 8)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {app.prefix}_jobs")
    runners = {
        name: Runner(
            app.backend,
            {t.kind: t for t in tasks.values()},
            kinds=[t.kind],
            worker_id="b:1",
            result_max_bytes=app.result_max_bytes,
        )
        for name, t in tasks.items()
    }
    per_job: dict[str, list[float]] = {name: [] for name in tasks}
    taken: dict[str, list[int]] = {name: [] for name in tasks}
    for _ in range(count):
        for name, runner in runners.items():
            request = runner.plan.request(free=8, running={}, is_renewed=True)
            assert request is not None
            started = time.perf_counter()
            jobs = runner.claim(request)
            elapsed = (time.perf_counter() - started) * 1000
            assert jobs, name
            per_job[name].append(elapsed / len(jobs))
            taken[name].append(len(jobs))
            app.backend.finish(
                [Finished(job.claim, Outcome(OutcomeKind.COMPLETED)) for job in jobs]
            )
    variants.empty(url, app.prefix)
    return {
        name: {
            "p50_ms_per_job": statistics.median(values),
            "p99_ms_per_job": statistics.quantiles(values, n=100)[98],
            "jobs_per_claim": statistics.mean(taken[name]),
        }
        for name, values in per_job.items()
    }


def measure(url: str, claims: int, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    prefix = f"bench_k_{secrets.token_hex(3)}"
    app, tasks = _build(url, prefix)
    app.migrate()
    try:
        rates: dict[str, list[float]] = {name: [] for name in tasks}
        for _ in range(rounds):
            for name, task in tasks.items():
                rates[name].append(variants.drain_rate(app, url, name, task, jobs, _enqueue))
        cost = claim_cost(app, url, tasks, claims)
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return {name: {"drain_jobs_per_s": max(rates[name]), **cost[name]} for name in tasks}


def unused(url: str, delays: int, jobs: int) -> dict[str, float]:
    """A plain task on a fresh prefix: µs per .delay(), and a plain drain's jobs/s."""
    prefix = f"bench_u_{secrets.token_hex(3)}"
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    task = app.task(kind="bench.plain")(noop)
    app.migrate()
    try:
        task.delay("t", 0)  # the pool's first connection, outside the clock
        started = time.perf_counter()
        for n in range(delays):
            task.delay("t", n)
        per_delay = (time.perf_counter() - started) / delays * 1e6
        variants.empty(url, prefix)
        rate = variants.drain_rate(
            app,
            url,
            "plain",
            task,
            jobs,
            lambda _n, t, c: t.delay_many([("t", n) for n in range(c)]),
        )
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return {"us_per_delay": per_delay, "drain_jobs_per_s": rate}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--delays", type=int, default=2000)
    parser.add_argument("--unused", action="store_true")
    parser.add_argument("--variants", default=None, help="names separated by ; (default: all)")
    args = parser.parse_args()
    if args.variants:
        for name in set(VARIANTS) - {"plain", *args.variants.split(";")}:
            del VARIANTS[name]
    url = database_url(args.database_url)
    if args.unused:
        sys.stdout.write(json.dumps(unused(url, args.delays, args.jobs)) + "\n")
        return
    result = measure(url, args.claims, args.jobs, args.rounds)
    base = result["plain"]["drain_jobs_per_s"]
    sys.stdout.write(
        f"{'variant':<20} {'drain jobs/s':>13} {'vs plain':>9} {'ms/job p50':>11}"
        f" {'ms/job p99':>11} {'jobs/claim':>11}\n"
    )
    for name, f in result.items():
        sys.stdout.write(
            f"{name:<20} {f['drain_jobs_per_s']:>13,.0f} {f['drain_jobs_per_s'] / base:>9.2f}"
            f" {f['p50_ms_per_job']:>11.3f} {f['p99_ms_per_job']:>11.3f}"
            f" {f['jobs_per_claim']:>11.1f}\n"
        )


if __name__ == "__main__":
    main()
