"""CPU per job of a threaded c=8 drain: this worker process's, and the server's.

The two-process drain on a 2-core machine is bound by CPU, so the figure that
says how far it can go is the CPU a job costs on each side, not the wall time.
This fills ``--jobs`` no-op jobs on a fresh prefix (untimed), then drains them
with ``Worker(app, concurrency=8)`` in this process and reads, around the
drain only: the process's user and system time (``getrusage``), and the summed
user and system time of every ``postgres`` process on this machine (``/proc``;
the server must be local, and other databases' work counts too, so run it on a
quiet server). A tree is chosen with ``PYTHONPATH``, as for the other scripts.

    PYTHONPATH=<tree> python bench/drain_cpu.py [--jobs 30000] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

from worker_app import FinishCounter, build_app
from workload import connect, database_url, drop_prefix, fresh_name

from venturi.worker import Worker

_TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu_seconds() -> float:
    """User plus system time of every process named ``postgres`` (children's included)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "comm").read_text().startswith("postgres"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        total += sum(int(value) for value in fields[11:15])
    return total / _TICKS


def drain_cpu(url: str, jobs: int) -> dict[str, float]:
    """Fill, drain and measure; the figures are per job."""
    prefix = fresh_name("cpu")
    app, noop, *_ = build_app(url, prefix)
    try:
        app.migrate()
        noop.delay_many([{"n": n} for n in range(jobs)], batch_size=5_000)
        with connect(url) as conn:
            conn.execute(f"VACUUM ANALYZE {prefix}_jobs")
        finishes = FinishCounter(app.backend, jobs)
        worker = Worker(app, concurrency=8, grace=5.0)
        before = resource.getrusage(resource.RUSAGE_SELF)
        server_before = server_cpu_seconds()
        started = time.perf_counter()
        worker.start()
        try:
            if not finishes.done.wait(600):
                raise RuntimeError(f"only {finishes.recorded} of {jobs} jobs recorded")
            ended = time.perf_counter()
            after = resource.getrusage(resource.RUSAGE_SELF)
            server_after = server_cpu_seconds()
        finally:
            worker.stop()
    finally:
        app.close()
        with connect(url) as conn:
            drop_prefix(conn, prefix)
    return {
        "jobs_per_s": jobs / (ended - started),
        "worker_user_us": 1e6 * (after.ru_utime - before.ru_utime) / jobs,
        "worker_system_us": 1e6 * (after.ru_stime - before.ru_stime) / jobs,
        "server_us": 1e6 * (server_after - server_before) / jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    figures = drain_cpu(database_url(args.database_url), args.jobs)
    worker = figures["worker_user_us"] + figures["worker_system_us"]
    print(
        f"{figures['jobs_per_s']:,.0f} jobs/s; worker CPU {worker:.1f} us a job "
        f"(user {figures['worker_user_us']:.1f}, system {figures['worker_system_us']:.1f}); "
        f"server CPU {figures['server_us']:.1f} us a job"
    )


if __name__ == "__main__":
    main()
