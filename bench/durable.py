"""Durable steps (ADR 0137): what a step costs, what the feature costs a plain drain when
unused, and how soon a sent event wakes its job beside how soon a new job is picked up.

```
python bench/durable.py [--database-url URL] [--jobs 2000] [--drain-jobs 10000] [--rounds 3]
                        [--probes 200] [--gap 0.02] [--base-commit REV] [--parts a,b,c]
```

- **steps** (cost per step): ``--jobs`` jobs of a handler that calls a no-op function
  ten times through ``ctx.step`` beside as many of a handler that calls it ten times
  plainly, each kind drained by ``venturi.testing.drain`` in this thread (claim, run,
  finish one job at a time: every round trip is on the clock), rounds alternating
  which kind goes first, best round kept. Per step: the difference per job over ten.
  Then both drained by a ``Worker`` (c=8), timed by the database (first to last
  ``completed`` entry), the throughput figure. The baseline of a step: the median of
  one autocommit ``INSERT`` of a small row from psycopg (a round trip and a commit).
- **unused** (the feature present but unused): ``--drain-jobs`` no-op jobs drained by
  a c=8 ``Worker`` in a child process of the ``--base-commit`` code (default: the
  commit this branch started from, before V12; exported with ``git archive``) beside
  a child of this checkout, each on a fresh prefix it migrates, rounds alternating.
- **lockstep** (the same, per statement): a claim of 8 and the finish of those 8 as
  completed, on a prefix migrated to V11 with the ``--base-commit`` statements and on
  a V12 prefix with this checkout's, turn by turn in one process on one backend
  object (only the SQL and the schema differ), ``--cycles`` cycles; median
  ms per cycle. The drain figures above spread by a fifth between runs on a shared
  machine; this one isolates what V12 adds to every job (the finish's one more
  ``WHEN``, the two foreign keys' checks on every update of a job row).
- **wake** (send to wake): a c=8 ``Worker`` in this process; ``--probes`` pairs, ``--gap``
  s apart: a new job's pickup (``.delay()`` to its handler's start) and a paused job's
  wake (``app.send`` to its ``ctx.wait_for`` returning), alternating; p50/p99 of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

import psycopg
from workload import connect, database_url, drop_prefix, fresh_name, percentile

import venturi
from venturi.testing import drain
from venturi.worker import Worker

BENCH_DIR = Path(__file__).resolve().parent
#: The commit this branch started from: the code before V12.
BASE_COMMIT = "c141a06"
EXPORTED = ("venturi", "migrations", "pyproject.toml")
STEPS = 10
DRAIN_TIMEOUT = 900.0


def work(n: int) -> int:
    """The work of one step: nothing, so only the step's bookkeeping is measured."""
    return n


def build(url: str, prefix: str) -> tuple[venturi.App, Any, Any]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)

    @app.task(kind="bench.steps")
    def stepped(ctx: venturi.Context, n: int) -> int:
        total = 0
        for i in range(STEPS):
            total += ctx.step(f"s{i}", work, n + i)
        return total

    @app.task(kind="bench.plain")
    def plain(ctx: venturi.Context, n: int) -> int:
        total = 0
        for i in range(STEPS):
            total += work(n + i)
        return total

    return app, stepped, plain


def _in_prefix(url: str, body: Callable[[venturi.App, Any, Any, str], Any]) -> Any:
    prefix = fresh_name("d")
    app, stepped, plain = build(url, prefix)
    app.migrate()
    try:
        return body(app, stepped, plain, prefix)
    finally:
        app.close()
        with connect(url) as conn:
            drop_prefix(conn, prefix)


def _empty(url: str, prefix: str) -> None:
    with connect(url) as conn:
        conn.execute(
            f"TRUNCATE {prefix}_journal, {prefix}_jobs, {prefix}_checkpoints, {prefix}_events"
        )


def step_cost(url: str, jobs: int, rounds: int) -> dict[str, Any]:
    """Seconds per job drained inline, each kind; the step's cost; c=8 worker rates."""

    def body(app: venturi.App, stepped: Any, plain: Any, prefix: str) -> dict[str, Any]:
        inline: dict[str, list[float]] = {"steps": [], "plain": []}
        rates: dict[str, list[float]] = {"steps": [], "plain": []}
        for round_no in range(rounds):
            order = [("steps", stepped), ("plain", plain)]
            if round_no % 2:
                order.reverse()
            for name, task in order:
                task.delay_many([{"n": n} for n in range(jobs)])
                with connect(url) as conn:
                    conn.execute(f"ANALYZE {prefix}_jobs")
                started = time.perf_counter()
                runs = drain(app, kinds=[task.kind])
                inline[name].append((time.perf_counter() - started) / len(runs))
                _empty(url, prefix)
            for name, task in order:
                rates[name].append(_worker_rate(app, url, prefix, task, jobs))
        best = {name: min(values) for name, values in inline.items()}
        return {
            "jobs": jobs,
            "inline_ms_per_job": {k: v * 1000 for k, v in best.items()},
            "ms_per_step": (best["steps"] - best["plain"]) * 1000 / STEPS,
            "raw_insert_ms": _raw_insert_ms(url, jobs * STEPS // 4),
            "worker_jobs_per_s": {name: max(values) for name, values in rates.items()},
            "samples": {"inline_s_per_job": inline, "worker_jobs_per_s": rates},
        }

    result: dict[str, Any] = _in_prefix(url, body)
    return result


def _raw_insert_ms(url: str, count: int) -> float:
    """The baseline of a step: one autocommit INSERT of a small row (a round trip and a
    commit) into a logged table with a two-column key, from psycopg, median ms."""
    table = fresh_name("raw")
    timings = []
    with connect(url) as conn:
        conn.execute(
            f"CREATE TABLE {table} (job text, name text, result jsonb, PRIMARY KEY (job, name))"
        )
        try:
            for n in range(count):
                started = time.perf_counter()
                conn.execute(
                    f"INSERT INTO {table} VALUES (%s, %s, %s::jsonb)", ("J", f"s{n}", str(n))
                )
                timings.append((time.perf_counter() - started) * 1000)
        finally:
            conn.execute(f"DROP TABLE {table}")
    return percentile(timings, 50)


def _worker_rate(app: venturi.App, url: str, prefix: str, task: Any, jobs: int) -> float:
    task.delay_many([{"n": n} for n in range(jobs)])
    with connect(url) as conn:
        conn.execute(f"ANALYZE {prefix}_jobs")
        rate = _drained(app, conn, prefix, task.kind)
    _empty(url, prefix)
    return rate


def _drained(app: venturi.App, conn: psycopg.Connection[Any], prefix: str, kind: str) -> float:
    """Jobs/s of a c=8 worker draining ``kind``, timed by the database."""
    worker = Worker(app, concurrency=8, kinds=[kind], poll_interval=0.5)
    worker.start()
    deadline = time.monotonic() + DRAIN_TIMEOUT
    try:
        while True:
            row = conn.execute(
                f"SELECT count(*) FROM {prefix}_jobs WHERE kind = %s AND status <> 'completed'",
                (kind,),
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the drain of {kind} did not end")
            time.sleep(0.1)
    finally:
        worker.stop()
    span = conn.execute(
        f"SELECT count(*), extract(epoch FROM max(recorded_at) - min(recorded_at)) "
        f"FROM {prefix}_journal WHERE kind = %s AND outcome = 'completed'",
        (kind,),
    ).fetchone()
    assert span is not None
    return float(span[0]) / float(span[1])


def unused_cost(url: str, jobs: int, rounds: int, base_commit: str) -> dict[str, Any]:
    """c=8 drain rates of no-op jobs: the base commit's code beside this checkout's."""
    with tempfile.TemporaryDirectory(prefix="venturi-durable-base-") as tmp:
        base = _export(base_commit, Path(tmp))
        rates: dict[str, list[float]] = {"base": [], "this": []}
        for round_no in range(rounds):
            order = [("base", base), ("this", None)]
            if round_no % 2:
                order.reverse()
            for name, pythonpath in order:
                rates[name].append(_child_drain(url, pythonpath, jobs))
    best = {name: max(values) for name, values in rates.items()}
    return {
        "jobs": jobs,
        "base_commit": base_commit,
        "jobs_per_s": best,
        "ratio": best["this"] / best["base"],
        "samples": rates,
    }


def _export(commit: str, into: Path) -> str:
    archive = subprocess.run(
        ["git", "-C", str(BENCH_DIR.parent), "archive", commit, *EXPORTED],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return str(into)


def _child_drain(url: str, pythonpath: str | None, jobs: int) -> float:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    code = pythonpath or str(BENCH_DIR.parent)
    env["PYTHONPATH"] = os.pathsep.join([code, str(BENCH_DIR)])
    done = subprocess.run(
        [sys.executable, __file__, "--child", url, str(jobs)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=DRAIN_TIMEOUT,
    )
    return float(done.stdout.strip().splitlines()[-1])


def _child(url: str, jobs: int) -> None:
    """A no-op c=8 drain with whatever venturi is on the path; prints jobs/s."""
    prefix = fresh_name("u")
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    task = app.task(kind="bench.noop")(work)
    app.migrate()
    try:
        task.delay_many([{"n": n} for n in range(jobs)])
        with connect(url) as conn:
            conn.execute(f"ANALYZE {prefix}_jobs")
            rate = _drained(app, conn, prefix, "bench.noop")
    finally:
        app.close()
        with connect(url) as conn:
            drop_prefix(conn, prefix)
    sys.stdout.write(f"{rate}\n")


def lockstep(url: str, cycles: int, base_commit: str) -> dict[str, Any]:
    """Median ms per claim-of-8-and-finish cycle, V11 (base statements) against V12."""
    from venturi.ids import new_id
    from venturi.naming import Prefix
    from venturi.postgres import PostgresBackend
    from venturi.postgres.migrator import Migrator, load_migrations
    from venturi.postgres.queries import parse_queries
    from venturi.types import Finished, NewJob, Outcome, OutcomeKind

    base_text = subprocess.run(
        ["git", "-C", str(BENCH_DIR.parent), "show", f"{base_commit}:venturi/postgres/queries.sql"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    migrations = load_migrations()
    sides: dict[str, Any] = {}
    try:
        for name, applied in (
            ("base", [m for m in migrations if m.version <= 11]),
            ("this", migrations),
        ):
            prefix = Prefix.parse(fresh_name("l"))
            with connect(url) as conn:
                Migrator(prefix, applied).migrate(conn)
            backend = PostgresBackend(url, prefix=prefix.value)
            if name == "base":
                statements = parse_queries(prefix.substitute(base_text))
                backend._queries = _Statements(statements)  # type: ignore[assignment]
            jobs = [NewJob(new_id(), "bench.noop", '{"n": 1}') for _ in range(cycles * 8)]
            for start in range(0, len(jobs), 500):
                backend.enqueue(jobs[start : start + 500])
            with connect(url) as conn:
                conn.execute(f"VACUUM ANALYZE {prefix.value}_jobs")
            sides[name] = (prefix, backend, [])
        for cycle in range(cycles):
            order = ["base", "this"] if cycle % 2 == 0 else ["this", "base"]
            for name in order:
                _, backend, timings = sides[name]
                started = time.perf_counter()
                claimed = backend.claim(
                    kinds=["bench.noop"], limit=8, worker_id="b:1", lease=timedelta(minutes=5)
                )
                backend.finish([Finished(j.claim, Outcome(OutcomeKind.COMPLETED)) for j in claimed])
                timings.append((time.perf_counter() - started) * 1000)
                assert len(claimed) == 8
    finally:
        for prefix, backend, _ in sides.values():
            backend.close()
            with connect(url) as conn:
                drop_prefix(conn, prefix.value)
    medians = {name: statistics.median(side[2]) for name, side in sides.items()}
    return {
        "cycles": cycles,
        "ms_per_cycle": medians,
        "ratio": medians["this"] / medians["base"],
    }


class _Statements:
    """Another version's statements, looked up by name as ``Queries`` does."""

    def __init__(self, statements: dict[str, Any]) -> None:
        self._statements = statements

    def __getattr__(self, name: str) -> Any:
        return self._statements[name]


def wake_latency(url: str, probes: int, gap: float) -> dict[str, Any]:
    """Pickup of a new job beside the wake of a paused one, alternating, c=8 worker."""

    def body(app: venturi.App, stepped: Any, plain: Any, prefix: str) -> dict[str, Any]:
        started_at: dict[str, float] = {}
        lock = threading.Lock()

        @app.task(kind="bench.stamp")
        def stamp(ctx: venturi.Context) -> None:
            with lock:
                started_at[ctx.job_id or ""] = time.time()

        @app.task(kind="bench.waiter")
        def waiter(ctx: venturi.Context) -> None:
            ctx.wait_for("go")
            with lock:
                started_at[ctx.job_id or ""] = time.time()

        waiting = waiter.delay_many([{} for _ in range(probes)])
        worker = Worker(app, concurrency=8, poll_interval=1.0)
        worker.start()
        pickups: list[float] = []
        wakes: list[float] = []
        try:
            with connect(url) as conn:
                _wait_paused(conn, prefix, probes)
            time.sleep(1.0)  # the worker settles into its idle wait
            sent: dict[str, float] = {}
            enqueued: dict[str, float] = {}
            for n, ref in enumerate(waiting):
                if n % 2:
                    before = time.time()
                    app.send(ref.id, "go")
                    sent[ref.id] = before
                    time.sleep(gap)
                    before = time.time()
                    enqueued[stamp.delay().id] = before
                else:
                    before = time.time()
                    enqueued[stamp.delay().id] = before
                    time.sleep(gap)
                    before = time.time()
                    app.send(ref.id, "go")
                    sent[ref.id] = before
                time.sleep(gap)
            deadline = time.monotonic() + 60
            while len(started_at) < len(sent) + len(enqueued):
                if time.monotonic() > deadline:
                    raise TimeoutError("probes did not all run")
                time.sleep(0.05)
        finally:
            worker.stop()
        pickups = [(started_at[i] - t) * 1000 for i, t in enqueued.items()]
        wakes = [(started_at[i] - t) * 1000 for i, t in sent.items()]
        return {
            "probes": probes,
            "pickup_ms": {"p50": percentile(pickups, 50), "p99": percentile(pickups, 99)},
            "wake_ms": {"p50": percentile(wakes, 50), "p99": percentile(wakes, 99)},
        }

    result: dict[str, Any] = _in_prefix(url, body)
    return result


def _wait_paused(conn: psycopg.Connection[Any], prefix: str, probes: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        row = conn.execute(
            f"SELECT count(*) FROM {prefix}_jobs WHERE kind = 'bench.waiter' "
            "AND status = 'pending' AND run_count = 1"
        ).fetchone()
        if row is not None and row[0] == probes:
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the waiters did not all pause")
        time.sleep(0.05)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--drain-jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--base-commit", default=BASE_COMMIT)
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--parts", default="steps,unused,lockstep,wake")
    args = parser.parse_args()
    url = database_url(args.database_url)
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {}
    if "steps" in parts:
        results["steps"] = step_cost(url, args.jobs, args.rounds)
    if "unused" in parts:
        results["unused"] = unused_cost(url, args.drain_jobs, args.rounds, args.base_commit)
    if "lockstep" in parts:
        results["lockstep"] = lockstep(url, args.cycles, args.base_commit)
    if "wake" in parts:
        results["wake"] = wake_latency(url, args.probes, args.gap)
    sys.stdout.write(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
