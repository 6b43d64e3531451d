"""Workflows (ADR 0125): a 10,000-member chord beside a plain drain of as many jobs, and
what workflows cost a drain of plain jobs.

```
python bench/workflow_bench.py [--members 10000] [--workers 1] [--jobs 20000] [--rounds 3]
                               [--base-commit REV]
```

- **Chord vs. plain drain.** On fresh prefixes of this checkout, ``--workers``
  c=8 worker processes (this file run with ``--worker``, serving ``bench.noop`` and the callback
  ``bench.flow_total``) drains either ``--members`` no-op jobs, or a chord of
  ``--members`` no-op members and one callback that sums their results. Timed
  by the database: the plain drain over the span of its ``completed`` journal
  entries, the chord from its first member's ``completed`` entry to the
  callback's. Rounds alternate which goes first; the best round of each is kept.
- **c=8 drain, no workflow, before and after.** ``--jobs`` no-op jobs on a
  prefix migrated, and drained by a worker, of the ``--base-commit`` code
  (default: the commit this branch started from, before V9; exported with
  ``git archive``), beside the same with this checkout, rounds alternating.

``workflow_figures(url, ...)`` returns both as a dict (for ``bench/run.py``).
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
from collections.abc import Iterator
from contextlib import closing, contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any

from venturi_bench import BENCH_DIR
from workload import NOOP_KIND, connect, database_url, drop_prefix, fresh_name, noop_payload

import venturi
from venturi.worker import Worker

#: The commit the workflows branch started from: the code before V9.
BASE_COMMIT = "84bc6ad"
TOTAL_KIND = "bench.flow_total"
#: What a base version needs to run from an export: its migrator finds a checkout's
#: ``migrations/`` beside its pyproject.toml.
EXPORTED = ("venturi", "migrations", "pyproject.toml")
#: Hang guard for one drain, not a speed figure.
DRAIN_TIMEOUT = 900.0


def noop(n: int) -> int:
    """A member: no work, so only the queue (and the hand-on) is measured."""
    return n


def total(values: list[int]) -> int:
    """The chord's callback."""
    return sum(values)


def build_app(url: str, prefix: str) -> tuple[venturi.App, Any, Any]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    return app, app.task(kind=NOOP_KIND)(noop), app.task(kind=TOTAL_KIND)(total)


def _env(pythonpath: str | None) -> dict[str, str]:
    """This environment, with ``pythonpath`` (another version's code) first if given."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    return env


@contextmanager
def flow_prefix(url: str) -> Iterator[tuple[str, Any, Any]]:
    """A fresh prefix migrated by this checkout, dropped after; its tasks enqueue through
    this checkout. An older version's worker serves it too: later migrations only add
    nullable columns and tables, which older code never reads."""
    value = fresh_name("w")
    subprocess.run(
        [sys.executable, __file__, "--migrate", "--database-url", url, "--prefix", value],
        check=True,
        env=_env(None),
    )
    app, member, callback = build_app(url, value)
    try:
        yield value, member, callback
    finally:
        app.close()
        with closing(connect(url)) as conn:
            drop_prefix(conn, value)


@contextmanager
def workers(
    url: str, prefix: str, log_dir: Path, count: int, pythonpath: str | None = None
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` c=8 worker processes running the code on ``pythonpath`` (None: this checkout)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, __file__, "--worker", "--database-url", url, "--prefix", prefix]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for n in range(count):
            with (log_dir / f"worker-{prefix}-{n}.log").open("wb") as log:
                processes.append(
                    subprocess.Popen(
                        argv,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=_env(pythonpath),
                    )
                )
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)


def _span(url: str, sql: str) -> float:
    with closing(connect(url)) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None and row[0] is not None
    return float(row[0])


def _wait(
    url: str, prefix: str, processes: list[subprocess.Popen[bytes]], kind: str, done: int
) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT
    with closing(connect(url)) as conn:
        while True:
            row = conn.execute(
                f"SELECT count(*) FROM {prefix}_jobs WHERE kind = %s AND status = 'completed'",
                (kind,),
            ).fetchone()
            if row is not None and row[0] >= done:
                return
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                raise RuntimeError(f"the worker of {prefix} stopped or took too long")
            time.sleep(0.25)


def plain_drain(
    url: str, jobs: int, log_dir: Path, pythonpath: str | None = None, count: int = 1
) -> dict[str, Any]:
    """``jobs`` no-op jobs drained by ``count`` c=8 workers of the code on ``pythonpath``."""
    with flow_prefix(url) as (prefix, member, _):
        member.delay_many([noop_payload(n) for n in range(jobs)], batch_size=5_000)
        with closing(connect(url)) as conn:
            conn.execute(f"ANALYZE {prefix}_jobs")
        with workers(url, prefix, log_dir, count, pythonpath) as processes:
            _wait(url, prefix, processes, NOOP_KIND, jobs)
        span = _span(
            url,
            f"SELECT extract(epoch FROM max(recorded_at) - min(recorded_at))"
            f" FROM {prefix}_journal WHERE outcome = 'completed'",
        )
    return {"jobs": jobs, "span_s": round(span, 3), "jobs_per_s": round(jobs / span)}


def chord_drain(url: str, members: int, log_dir: Path, count: int = 1) -> dict[str, Any]:
    """A chord of ``members`` no-op members and a summing callback, by ``count`` workers."""
    from venturi import chord  # not at the top: a base version's worker imports this file

    with flow_prefix(url) as (prefix, member, callback):
        began = time.perf_counter()
        ref = chord([member.s(n) for n in range(members)], callback.s()).delay()
        enqueue_s = time.perf_counter() - began
        with closing(connect(url)) as conn:
            for table in ("jobs", "steps", "edges"):
                conn.execute(f"ANALYZE {prefix}_{table}")
        with workers(url, prefix, log_dir, count) as processes:
            _wait(url, prefix, processes, TOTAL_KIND, 1)
        assert ref.result(timeout=10) == sum(range(members))
        span = _span(
            url,
            f"SELECT extract(epoch FROM max(recorded_at) - min(recorded_at))"
            f" FROM {prefix}_journal WHERE outcome = 'completed'",
        )
        members_span = _span(
            url,
            f"SELECT extract(epoch FROM max(e.recorded_at) - min(e.recorded_at))"
            f" FROM {prefix}_journal AS e WHERE e.outcome = 'completed' AND e.kind = '{NOOP_KIND}'",
        )
    return {
        "members": members,
        "span_s": round(span, 3),
        "members_span_s": round(members_span, 3),
        "callback_after_last_member_s": round(span - members_span, 3),
        "enqueue_s": round(enqueue_s, 3),
    }


def workflow_figures(
    url: str,
    *,
    members: int = 10_000,
    chord_workers: int = 1,
    jobs: int = 20_000,
    rounds: int = 3,
    base_commit: str = BASE_COMMIT,
    log_dir: Path = BENCH_DIR / "results" / "logs",
) -> dict[str, Any]:
    """The chord beside the plain drain (both by ``chord_workers`` c=8 workers), and the
    plain drain of one c=8 worker before and after."""
    samples: dict[str, list[dict[str, Any]]] = {"plain": [], "chord": [], "before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="venturi-base-") as base:
        base_path = export(base_commit, Path(base))
        for round_no in range(rounds):
            pairs: list[tuple[str, Any]] = [
                ("plain", lambda: plain_drain(url, members, log_dir, count=chord_workers)),
                ("chord", lambda: chord_drain(url, members, log_dir, chord_workers)),
                ("before", lambda: plain_drain(url, jobs, log_dir, base_path)),
                ("after", lambda: plain_drain(url, jobs, log_dir)),
            ]
            if round_no % 2:
                pairs = [pairs[1], pairs[0], pairs[3], pairs[2]]
            for name, run in pairs:
                samples[name].append(run())
                print(f"round {round_no + 1} {name}: {samples[name][-1]}", file=sys.stderr)
    plain = min(s["span_s"] for s in samples["plain"])
    chord_span = min(s["span_s"] for s in samples["chord"])
    before = max(s["jobs_per_s"] for s in samples["before"])
    after = max(s["jobs_per_s"] for s in samples["after"])
    return {
        "chord_vs_plain": {
            "members": members,
            "workers": chord_workers,
            "plain_span_s": plain,
            "chord_span_s": chord_span,
            "ratio": round(chord_span / plain, 3),
        },
        "drain_c8_no_workflow": {
            "base_commit": base_commit,
            "jobs": jobs,
            "before_jobs_per_s": round(before),
            "after_jobs_per_s": round(after),
            "ratio": round(after / before, 3),
        },
        "samples": samples,
    }


def export(commit: str, into: Path) -> str:
    """``commit``'s ``EXPORTED`` files as an importable tree; returns its path."""
    archive = subprocess.run(
        ["git", "-C", str(BENCH_DIR.parent), "archive", commit, *EXPORTED],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return str(into)


def _run_worker(url: str, prefix: str) -> None:
    app, _, _ = build_app(url, prefix)
    with closing(app):
        Worker(app, concurrency=8, grace=5.0).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--migrate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=1, help="c=8 workers on the chord")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-commit", default=BASE_COMMIT)
    args = parser.parse_args()
    url = database_url(args.database_url)
    if args.migrate:
        app, _, _ = build_app(url, args.prefix)
        with closing(app):
            app.migrate()
        return
    if args.worker:
        _run_worker(url, args.prefix)
        return
    report = workflow_figures(
        url,
        members=args.members,
        chord_workers=args.workers,
        jobs=args.jobs,
        rounds=args.rounds,
        base_commit=args.base_commit,
    )
    out = BENCH_DIR / "results" / f"workflows-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    flow, drain = report["chord_vs_plain"], report["drain_c8_no_workflow"]
    print(f"c=8, {flow['members']:,} no-op jobs (best of {args.rounds}):")
    print(f"  plain drain:              {flow['plain_span_s']:.2f} s")
    print(f"  chord (members+callback): {flow['chord_span_s']:.2f} s  (ratio {flow['ratio']})")
    print(f"c=8 drain, {drain['jobs']:,} plain no-op jobs (best of {args.rounds}):")
    print(f"  before ({drain['base_commit']}): {drain['before_jobs_per_s']:,} jobs/s")
    print(f"  after:            {drain['after_jobs_per_s']:,} jobs/s  (ratio {drain['ratio']})")
    print(f"samples: {out}")


if __name__ == "__main__":
    main()
