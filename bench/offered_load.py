"""Offered load on a private cluster: steady 2,000 jobs/s, and the xmin-horizon hold (ADR 0132).

Both scenarios run on a PostgreSQL cluster the bench makes for itself
(``initdb`` into a temporary directory, its own port, ``fsync`` and
autovacuum ON, as a production server runs; the tests' ``PrivateServer``),
never on the shared server, and delete it afterwards. One worker process
(``worker_app.py``) drains while an enqueuer offers jobs on a fixed schedule
in 10 ms ticks (``delay_many`` of the tick's jobs, so one Python thread can
offer thousands per second); each job's argument is its enqueue time, its
handler returns its start time, so every job's lag is known. Every
``--interval`` seconds one line: offered and completed per second, lag p50/p99
of the jobs started in the interval, dead/live tuples of the two tables,
the worker's RSS, and, for the worker's claims in the interval (timed inside
the worker, ``worker_app.py --claim-timings``), p50/p95.

- ``steady``: ``--rate`` (2,000) jobs/s for ``--minutes`` (10), concurrency 8,
  terminal jobs older than 60 s deleted every second, 500 rows per transaction
  (``app.cleanup``, paced: ``CLEANUP_EVERY``, ``CLEANUP_BATCH``).
- ``xmin``: ``--rate`` (800) jobs/s, concurrency 16, ``--phase`` (60) s before,
  then a session holds back the xmin horizon (a REPEATABLE READ transaction,
  its snapshot taken, left idle) for one phase, then one phase after. Claim
  p95 per phase; ``EXPLAIN (ANALYZE, BUFFERS)`` of ``claim_jobs`` (rolled
  back) before the hold and near its end, saved beside the results.

    python bench/offered_load.py steady [--rate 2000] [--minutes 10] [--interval 10]
    python bench/offered_load.py xmin [--rate 800] [--phase 60] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from venturi_bench import BENCH_DIR, Prefix, WorkerProcess
from workload import connect, percentile, wait_until

from venturi.naming import Prefix as Naming
from venturi.postgres.backend import claim_input
from venturi.postgres.queries import Queries

sys.path.insert(0, str(BENCH_DIR.parent / "tests"))
from private_server import PrivateServer

RESULTS_DIR = BENCH_DIR / "results"
TICK = 0.010
#: Appended to the private cluster's postgresql.conf (after the test launcher's
#: ``fsync = off``, so these win): a production-like durable server.
CLUSTER_SETTINGS = """
fsync = on
synchronous_commit = on
autovacuum = on
max_connections = 100
shared_buffers = 128MB
"""


@contextmanager
def private_cluster() -> Iterator[str]:
    """A fresh durable cluster with autovacuum on; yields its URL, deletes it afterwards."""
    server = PrivateServer()
    try:
        with (server.data / "postgresql.conf").open("a") as conf:
            conf.write(CLUSTER_SETTINGS)
        server.start()
        yield server.url
    finally:
        server.close()


class Offer:
    """A thread offering ``rate`` stamp jobs per second in ``TICK`` ticks, never catching up
    more than one second: if enqueueing cannot keep the rate, ``offered`` shows it."""

    def __init__(self, prefix: Prefix, rate: float) -> None:
        self.prefix, self.rate = prefix, rate
        self.offered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offer", daemon=True)

    def start(self) -> Offer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(TICK):
            due = int((time.monotonic() - started) * self.rate)
            count = min(due - self.offered, int(self.rate))
            if count <= 0:
                continue
            at = int(time.time() * 1e6)
            try:
                self.prefix.stamp.delay_many([{"n": at}] * count)
            except Exception as exc:  # counted and shown; the run goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._stop.wait(0.5)
            self.offered = max(self.offered + count, due - int(self.rate))


_LAG = """
SELECT count(*),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY lag),
       percentile_disc(0.99) WITHIN GROUP (ORDER BY lag)
FROM (SELECT (e.note::float8 - (j.payload->>'n')::float8 / 1e6) * 1000 AS lag
      FROM {p}_journal AS e JOIN {p}_jobs AS j ON j.id = e.job_id
      WHERE e.id > %s AND e.id <= %s AND e.outcome = 'completed') AS l
"""


def _tables(prefix: Prefix) -> dict[str, dict[str, int]]:
    rows = prefix.conn.execute(
        "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables "
        "WHERE relname IN (%s, %s)",
        (f"{prefix.value}_jobs", f"{prefix.value}_journal"),
    ).fetchall()
    return {
        name.removeprefix(f"{prefix.value}_"): {"live": live, "dead": dead, "autovacuums": av}
        for name, live, dead, av in rows
    }


class Sampler:
    """One record per interval; ``claims`` is the worker's claim-timing list, if read live."""

    def __init__(self, prefix: Prefix, offer: Offer, worker: WorkerProcess) -> None:
        self.prefix, self.offer, self.worker = prefix, offer, worker
        self.started = self.at = time.monotonic()
        self.journal_id = prefix.last_journal_id()
        self.offered = 0
        self.records: list[dict[str, Any]] = []

    def sample(self, phase: str = "") -> dict[str, Any]:
        now = time.monotonic()
        newest = self.prefix.last_journal_id()
        done, p50, p99 = self.prefix.conn.execute(
            self.prefix.sql(_LAG), (self.journal_id, newest)
        ).fetchone() or (0, None, None)
        elapsed = now - self.at
        offered = self.offer.offered
        record = {
            "t_s": round(now - self.started, 1),
            "phase": phase,
            "offered_per_s": round((offered - self.offered) / elapsed, 1),
            "completed_per_s": round(done / elapsed, 1),
            "lag_p50_ms": round(p50, 2) if p50 is not None else None,
            "lag_p99_ms": round(p99, 2) if p99 is not None else None,
            "tables": _tables(self.prefix),
            "worker_rss_mib": round(self.worker.memory().get("VmRSS", 0) / 1024, 1),
            "wall": time.time(),
        }
        self.records.append(record)
        self.at, self.journal_id, self.offered = now, newest, offered
        _log(record)
        return record


def _log(record: dict[str, Any]) -> None:
    t = record["tables"]
    print(
        f"  t={record['t_s']:>6}s {record['phase']:<7} offered {record['offered_per_s']:>7,.0f}/s"
        f" completed {record['completed_per_s']:>7,.0f}/s lag p50/p99 {record['lag_p50_ms']}/"
        f"{record['lag_p99_ms']} ms dead jobs/journal "
        f"{t.get('jobs', {}).get('dead')}/{t.get('journal', {}).get('dead')}"
        f" rss {record['worker_rss_mib']} MiB",
        file=sys.stderr,
        flush=True,
    )


def _claim_stats(claims: list[list[float]], start: float, end: float) -> dict[str, Any]:
    """p50/p95/p99 ms of the claims that ended in [start, end) (wall clock)."""
    durations = [c[1] * 1000 for c in claims if start <= c[0] < end]
    if not durations:
        return {"claims": 0}
    return {
        "claims": len(durations),
        "p50_ms": round(percentile(durations, 50), 2),
        "p95_ms": round(percentile(durations, 95), 2),
        "p99_ms": round(percentile(durations, 99), 2),
        "jobs_per_claim": round(
            sum(c[2] for c in claims if start <= c[0] < end) / len(durations), 1
        ),
    }


def explain_claim(url: str, prefix: Prefix, limit: int) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the worker's claim statement, rolled back."""
    statement = Queries(Naming(prefix.value)).claim_jobs.sql
    params = {
        "kinds": claim_input([prefix.stamp.kind], [limit]),
        "limit": limit,
        "horizon": timedelta(0),
        "worker_id": "bench:explain",
        "lease": timedelta(minutes=5),
    }
    with connect(url) as conn, conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).fetchall()
    return "\n".join(row[0] for row in rows)


#: Retention paced (issue 34): terminal jobs past ``cleanup_after`` are deleted every
#: second in short transactions of ``CLEANUP_BATCH`` rows, not once per interval in one
#: burst of about 20,000 that competed with the claims for the two cores (round two's
#: 120 ms worst lag; journal, section 16).
CLEANUP_EVERY = 1.0
CLEANUP_BATCH = 500


def _run(
    url: str,
    rate: float,
    concurrency: int,
    phases: list[tuple[str, float]],
    interval: float,
    run_dir: Path,
    *,
    cleanup_after: timedelta | None,
    hold_phase: str | None = None,
    explain_limit: int = 16,
    worker_env: dict[str, str] | None = None,
    time_claims: bool = True,
) -> dict[str, Any]:
    """One scenario: ``phases`` of (name, seconds) one after the other under a steady offer.

    ``time_claims``: the worker records every claim (about 140 bytes each, kept until
    it exits), so it is off where the worker's RSS is a figure (``steady``).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    timings = run_dir / "claim-timings.json"
    prefix = Prefix(url)
    result: dict[str, Any] = {"rate": rate, "concurrency": concurrency, "explain": {}}
    holder = None
    try:
        prefix.stamp.delay(-1)  # pools open, before any clock
        options = ["--claim-timings", str(timings)] if time_claims else []
        worker = WorkerProcess(prefix, concurrency, run_dir, worker_env, options=options)
        offer = Offer(prefix, rate)
        bounds: dict[str, tuple[float, float]] = {}
        try:
            registered = wait_until(
                lambda: prefix.scalar("SELECT count(*) FROM {p}_workers") > 0, timeout=60
            )
            if not registered:
                raise RuntimeError(f"the worker did not register in 60 s; see {worker.log_path}")
            offer.start()
            sampler = Sampler(prefix, offer, worker)
            for phase, seconds in phases:
                begun = time.time()
                if phase == hold_phase:
                    result["explain"]["before_hold"] = explain_claim(url, prefix, explain_limit)
                    holder = connect(url)
                    holder.autocommit = False
                    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    holder.execute(prefix.sql("SELECT count(*) FROM {p}_jobs"))
                    result["held_xmin"] = prefix.scalar(
                        "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = %s",
                        (holder.info.backend_pid,),
                    )
                ends = time.monotonic() + seconds
                while (left := ends - time.monotonic()) > 0:
                    near_end = left <= interval + 1 and "during_hold" not in result["explain"]
                    if phase == hold_phase and near_end:
                        result["explain"]["during_hold"] = explain_claim(url, prefix, explain_limit)
                    sample_at = time.monotonic() + min(interval, left)
                    while (pause := sample_at - time.monotonic()) > 0:
                        time.sleep(min(CLEANUP_EVERY, pause))
                        if cleanup_after is not None:
                            prefix.app.cleanup(older_than=cleanup_after, batch_size=CLEANUP_BATCH)
                    worker.check_alive()
                    sampler.sample(phase)
                if phase == hold_phase and holder is not None:
                    holder.rollback()
                    holder.close()
                    holder = None
                bounds[phase] = (begun, time.time())
            if hold_phase is not None:
                result["explain"]["after_hold"] = explain_claim(url, prefix, explain_limit)
        finally:
            offer.stop()
            worker.stop()
        claims = json.loads(timings.read_text()) if timings.exists() else []
        result["offer_errors"] = offer.errors[:5]
        result["phases"] = {
            name: {**_claim_stats(claims, start, end), **_phase_summary(sampler.records, name)}
            for name, (start, end) in bounds.items()
        }
        result["intervals"] = sampler.records
        return result
    finally:
        if holder is not None:
            holder.close()
        prefix.close()


def _phase_summary(records: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    mine = [r for r in records if r["phase"] == phase]
    if not mine:
        return {}
    p99s = [r["lag_p99_ms"] for r in mine if r["lag_p99_ms"] is not None]
    return {
        "offered_per_s": round(sum(r["offered_per_s"] for r in mine) / len(mine), 1),
        "completed_per_s": round(sum(r["completed_per_s"] for r in mine) / len(mine), 1),
        "lag_p99_ms_worst_interval": max(p99s) if p99s else None,
        "dead_jobs_first_last": (
            mine[0]["tables"].get("jobs", {}).get("dead"),
            mine[-1]["tables"].get("jobs", {}).get("dead"),
        ),
        "dead_jobs_max": max(r["tables"].get("jobs", {}).get("dead", 0) for r in mine),
        "worker_rss_mib_first_last": (mine[0]["worker_rss_mib"], mine[-1]["worker_rss_mib"]),
    }


def steady(
    rate: float, minutes: float, run_dir: Path, *, interval: float = 10.0, concurrency: int = 8
) -> dict[str, Any]:
    """``rate`` jobs/s for ``minutes`` on a private cluster; per-interval records + summary."""
    with private_cluster() as url:
        result = _run(
            url,
            rate,
            concurrency,
            [("steady", minutes * 60)],
            interval,
            run_dir,
            cleanup_after=timedelta(seconds=60),
            time_claims=False,
        )
    records = result["intervals"]
    lags = [r["lag_p99_ms"] for r in records if r["lag_p99_ms"] is not None]
    rss = [r["worker_rss_mib"] for r in records]
    result["summary"] = {
        "completed_over_offered": sum(r["completed_per_s"] for r in records)
        / max(1.0, sum(r["offered_per_s"] for r in records)),
        "lag_p99_ms_median_interval": percentile(lags, 50) if lags else None,
        "lag_p99_ms_worst_interval": max(lags) if lags else None,
        "intervals_over_50_ms": f"{sum(lag > 50 for lag in lags)} of {len(lags)}",
        "dead_jobs_max": max(r["tables"].get("jobs", {}).get("dead", 0) for r in records),
        "dead_jobs_last": records[-1]["tables"].get("jobs", {}).get("dead"),
        "rss_first_mib": rss[0],
        "rss_last_mib": rss[-1],
    }
    return result


def xmin_hold(
    rate: float,
    phase: float,
    run_dir: Path,
    *,
    interval: float = 5.0,
    concurrency: int = 16,
    worker_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Before / during / after a held xmin horizon, ``phase`` seconds each; ``worker_env``:
    the worker's environment, e.g. a ``PYTHONPATH`` with a scratch copy of venturi."""
    with private_cluster() as url:
        return _run(
            url,
            rate,
            concurrency,
            [("before", phase), ("hold", phase), ("after", phase)],
            interval,
            run_dir,
            cleanup_after=None,
            hold_phase="hold",
            worker_env=worker_env,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("scenario", choices=["steady", "xmin"])
    parser.add_argument("--rate", type=float, help="jobs/s offered (steady 2000, xmin 800)")
    parser.add_argument("--minutes", type=float, default=10.0, help="steady: how long")
    parser.add_argument("--phase", type=float, default=60.0, help="xmin: seconds per phase")
    parser.add_argument("--interval", type=float, help="seconds per record (10; xmin 5)")
    parser.add_argument("--concurrency", type=int, help="worker threads (8; xmin 16)")
    parser.add_argument(
        "--worker-pythonpath", help="xmin: the worker imports venturi from here (a scratch copy)"
    )
    args = parser.parse_args()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_dir = RESULTS_DIR / f"{args.scenario}-{stamp}"
    if args.scenario == "steady":
        result = steady(
            args.rate or 2000.0,
            args.minutes,
            run_dir,
            interval=args.interval or 10.0,
            concurrency=args.concurrency or 8,
        )
        print(json.dumps(result["summary"], indent=2))
    else:
        result = xmin_hold(
            args.rate or 800.0,
            args.phase,
            run_dir,
            interval=args.interval or 5.0,
            concurrency=args.concurrency or 16,
            worker_env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": args.worker_pythonpath}
            if args.worker_pythonpath
            else None,
        )
        print(json.dumps(result["phases"], indent=2))
        for name, plan in result["explain"].items():
            (run_dir / f"explain-{name}.txt").write_text(plan)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
    print(f"results: {run_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
