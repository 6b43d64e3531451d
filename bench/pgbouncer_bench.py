"""Through PgBouncer (transaction mode) beside direct, in one run (ADR 0123).

Two figures, each measured direct and through a pgbouncer started for the
run (the tests' launcher, ``tests/contract/pgbouncer.py``; Debian's
``pgbouncer`` must be installed), rounds alternating which goes first:

- drain c=8: one worker process, concurrency 8, draining no-op jobs, timed by
  the journal as in ``run.py``;
- 8 worker processes (concurrency 8 each) draining together, with the peak
  number of server sessions they hold (``pg_stat_activity``, sampled every
  0.2 s; through pgbouncer that is pgbouncer's server pool plus each worker's
  direct LISTEN session).

    python bench/pgbouncer_bench.py [--quick] [--database-url URL] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from venturi_bench import BENCH_DIR, Prefix, fresh_prefix

sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "contract"))
from pgbouncer import PgBouncer

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
RESULTS = BENCH_DIR / "results"


def _spawn(url: str, direct_url: str | None, prefix: Prefix, tag: str, log: Path) -> Any:
    argv = [sys.executable, str(BENCH_DIR / "worker_app.py"), "--database-url", url]
    argv += ["--prefix", prefix.value, "--concurrency", "8"]
    if direct_url is not None:
        argv += ["--direct-url", direct_url]
    with log.open("ab") as output:
        return subprocess.Popen(
            argv,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PGAPPNAME": tag},
        )


def _sessions(prefix: Prefix, tag: str) -> int:
    return int(
        prefix.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,))
    )


def drain(
    server_url: str, url: str, direct_url: str | None, jobs: int, processes: int, log: Path
) -> dict[str, Any]:
    """``processes`` workers (c=8) drain ``jobs`` no-op jobs on a fresh prefix."""
    with fresh_prefix(server_url) as prefix:
        prefix.enqueue_noop(jobs)
        prefix.conn.execute(prefix.sql("ANALYZE {p}_jobs"))
        tag = f"bench_pgb_{secrets.token_hex(3)}"
        peak = 0
        workers = [_spawn(url, direct_url, prefix, tag, log) for _ in range(processes)]
        try:
            deadline = time.monotonic() + 600
            pause = threading.Event()
            while prefix.completed() < jobs:
                if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                    raise RuntimeError(f"drain did not finish; see {log}")
                peak = max(peak, _sessions(prefix, tag))
                pause.wait(0.2)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(30)
        done, span = prefix.completed_span()
    return {"jobs_per_s": round(done / span, 1), "span_s": round(span, 3), "peak_sessions": peak}


def measure(url: str, jobs: int, rounds: int, log: Path) -> dict[str, list[dict[str, Any]]]:
    """Every figure's samples by name, ``rounds`` rounds alternating which path goes first."""
    bouncer = PgBouncer(url).start()
    samples: dict[str, list[dict[str, Any]]] = {}
    try:
        paths = {"direct": (url, None), "through pgbouncer": (bouncer.url, url)}
        for round_no in range(rounds):
            order = list(paths) if round_no % 2 == 0 else list(reversed(paths))
            for processes in (1, 8):
                for path in order:
                    via, direct_url = paths[path]
                    name = f"drain c=8 x {processes} process(es) {path}"
                    print(f"round {round_no + 1}: {name}", file=sys.stderr)
                    result = drain(url, via, direct_url, jobs, processes, log)
                    samples.setdefault(name, []).append(result)
    finally:
        bouncer.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--database-url", default=os.environ.get("VENTURI_DATABASE_URL", DEFAULT_URL)
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    jobs = 5_000 if args.quick else 20_000
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / f"pgbouncer-{int(time.time())}.log"
    samples = measure(args.database_url, jobs, rounds, log)
    (RESULTS / f"pgbouncer-{int(time.time())}.json").write_text(json.dumps(samples, indent=2))
    print(f"{'figure':<48} {'jobs/s (best)':>14} {'peak server sessions':>22}")
    for name, runs in samples.items():
        top = max(runs, key=lambda r: r["jobs_per_s"])
        print(f"{name:<48} {top['jobs_per_s']:>14,.0f} {max(r['peak_sessions'] for r in runs):>22}")


if __name__ == "__main__":
    main()
