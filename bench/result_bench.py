"""Results (ADR 0124): what storing results costs a drain nobody waits on, and how soon
a waiter sees a job end.

```
python bench/result_bench.py [--base-commit REV] [--jobs 20000] [--rounds 3] [--probes 200]
```

- **c=8 drain, no waiters, before and after.** ``--base-commit`` (default
  ``HEAD~``: the code before results) is exported with ``git archive`` into a
  temporary directory; its worker runs ``bench/worker_app.py`` with that
  directory first on ``PYTHONPATH``; every prefix is migrated by this checkout
  (its enqueue writes the newest columns; later migrations only add nullable
  columns and tables, which older workers never read). Rounds alternate
  (before then after, after then before, ...), so both see the same machine
  and neither always goes first; the best round
  of each is kept (interference only slows a round down). Timed by the
  database, as ``run.py``'s drains: jobs over the span of their ``completed``
  journal entries.
- **Result latency.** One idle c=8 worker; ``--probes`` times, one
  ``bench.result_probe`` job (50 ms of work, so its waiter is already waiting
  on its wake-up), then ``ref.result(timeout=10)``: latency is the time
  ``result()`` returned minus the time the handler returned (its result).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from venturi_bench import BENCH_DIR, wait_for_completed, worker
from worker_app import build_app
from workload import (
    RESULT_KIND,
    connect,
    database_url,
    drop_prefix,
    fresh_name,
    noop_payload,
    percentile,
)

import venturi

ROOT = BENCH_DIR.parent


class VersionedPrefix:
    """A fresh prefix migrated by this checkout, drained by the code on ``pythonpath``
    (None: this checkout)."""

    def __init__(self, url: str, pythonpath: str | None) -> None:
        self.url = url
        self.value = fresh_name("v")
        self.pythonpath = pythonpath
        self.app, self.noop, _, _ = build_app(url, self.value)
        self.app.migrate()
        self.conn = connect(url)

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [self.pythonpath, env.get("PYTHONPATH")])
            )
        return env

    def sql(self, template: str) -> str:
        return template.replace("{p}", self.value)

    def completed(self, *, after_id: int = 0) -> int:
        row = self.conn.execute(
            self.sql("SELECT count(*) FROM {p}_journal WHERE id > %s AND outcome = 'completed'"),
            (after_id,),
        ).fetchone()
        return int(row[0]) if row else 0

    def span(self) -> tuple[int, float]:
        row = self.conn.execute(
            self.sql(
                "SELECT count(*), extract(epoch FROM max(recorded_at) - min(recorded_at)) "
                "FROM {p}_journal WHERE outcome = 'completed'"
            )
        ).fetchone()
        assert row is not None
        return int(row[0]), float(row[1] or 0.0)

    def close(self) -> None:
        self.app.close()
        try:
            drop_prefix(self.conn, self.value)
        finally:
            self.conn.close()


def export(commit: str, into: Path) -> str:
    """``commit``'s ``venturi/`` and ``migrations/`` as an importable tree; returns its path."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "venturi", "migrations"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return str(into)


def drain(url: str, pythonpath: str | None, jobs: int, log_dir: Path) -> dict[str, Any]:
    prefix = VersionedPrefix(url, pythonpath)
    try:
        prefix.noop.delay_many([noop_payload(n) for n in range(jobs)], batch_size=5_000)
        prefix.conn.execute(prefix.sql("ANALYZE {p}_jobs"))
        with worker(prefix, 8, log_dir, env=prefix.env()) as process:
            wait_for_completed(prefix, process, jobs)
        done, span = prefix.span()
        return {"jobs_per_s": done / span, "jobs": done, "span_s": round(span, 3)}
    finally:
        prefix.close()


def result_latency(url: str, probes: int, log_dir: Path) -> dict[str, Any]:
    prefix = VersionedPrefix(url, None)
    try:
        probe = prefix.app.tasks()[RESULT_KIND]
        with worker(prefix, 8, log_dir, env=prefix.env()):
            probe.delay(-1).result(timeout=60)  # the worker is up and its pools are open
            time.sleep(0.5)
            latencies: list[float] = []
            ends: dict[str, tuple[float, float]] = {}
            for n in range(probes):
                ref = probe.delay(n)
                returned_at = ref.result(timeout=10)
                seen_at = time.time()
                latencies.append((seen_at - returned_at) * 1000)
                ends[ref.id] = (returned_at, seen_at)
        rows = prefix.conn.execute(
            prefix.sql(
                "SELECT job_id, extract(epoch FROM recorded_at) FROM {p}_journal"
                " WHERE outcome = 'completed' AND job_id = ANY(%s)"
            ),
            (list(ends),),
        ).fetchall()
    finally:
        prefix.close()
    # Split at the finish's journal time (same host, same clock): the worker's part
    # (handler return -> outcome recorded) and the waiter's (recorded -> result() returns).
    recorded = {job_id: float(at) for job_id, at in rows}
    worker_ms = [(recorded[i] - r) * 1000 for i, (r, _) in ends.items()]
    waiter_ms = [(s - recorded[i]) * 1000 for i, (_, s) in ends.items()]
    return {
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies), 2),
        "probes": len(latencies),
        "worker_part_p50_ms": round(percentile(worker_ms, 50), 2),
        "worker_part_p99_ms": round(percentile(worker_ms, 99), 2),
        "waiter_part_p50_ms": round(percentile(waiter_ms, 50), 2),
        "waiter_part_p99_ms": round(percentile(waiter_ms, 99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--base-commit", default="HEAD~")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=200)
    args = parser.parse_args()
    url = database_url(args.database_url)
    log_dir = BENCH_DIR / "results" / "logs"
    samples: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="venturi-base-") as base:
        base_path = export(args.base_commit, Path(base))
        for round_no in range(args.rounds):
            order = [("before", base_path), ("after", None)]
            # Swap who goes first every round: the second drain of a pair runs on a
            # server still writing out the first one's WAL and dropping its tables.
            for name, path in order if round_no % 2 == 0 else order[::-1]:
                sample = drain(url, path, args.jobs, log_dir)
                samples[name].append(sample)
                print(f"round {round_no + 1} {name}: {sample}", file=sys.stderr)
    latency = result_latency(url, args.probes, log_dir)
    before = max(s["jobs_per_s"] for s in samples["before"])
    after = max(s["jobs_per_s"] for s in samples["after"])
    report = {
        "version": venturi.__name__,
        "base_commit": args.base_commit,
        "drain_c8_no_waiters": {
            "before_jobs_per_s": round(before),
            "after_jobs_per_s": round(after),
            "ratio": round(after / before, 3),
            "samples": samples,
        },
        "result_latency": latency,
    }
    out = BENCH_DIR / "results" / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"c=8 drain, {args.jobs} no-op jobs, no waiters (best of {args.rounds}):")
    print(f"  before ({args.base_commit}): {before:,.0f} jobs/s")
    print(f"  after:                      {after:,.0f} jobs/s  (ratio {after / before:.3f})")
    print(
        f"result latency, handler return -> result() returns ({latency['probes']} probes): "
        f"p50 {latency['p50_ms']} ms, p99 {latency['p99_ms']} ms, max {latency['max_ms']} ms"
    )
    print(
        f"  of which handler return -> finish recorded: p50 {latency['worker_part_p50_ms']} ms, "
        f"p99 {latency['worker_part_p99_ms']} ms; recorded -> result() returns: "
        f"p50 {latency['waiter_part_p50_ms']} ms, p99 {latency['waiter_part_p99_ms']} ms"
    )
    print(f"samples: {out}")


if __name__ == "__main__":
    main()
