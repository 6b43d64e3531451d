"""Soak: enqueue at a steady rate while worker processes drain, for a bounded time.

    python bench/soak.py [--minutes 10] [--rate 200] [--workers 1] [--concurrency 8]
                         [--cleanup-older-than SECONDS] [--database-url URL] [--keep]

Every ``--interval`` seconds (default 10) it prints one line: jobs enqueued
and completed per second over the interval, the lag (age of the oldest
eligible pending job, from ``app.stats()``), pending and claimed counts,
each worker's resident memory, and the dead/live tuple counts PostgreSQL
reports for the prefix's two tables (``pg_stat_user_tables``). What to look
for in a healthy run: completed/s tracks enqueued/s, lag stays flat near
zero, RSS stays flat, dead tuples rise and fall as autovacuum passes.

It stops by itself after ``--minutes``: enqueueing stops, workers get up to
60 s to drain what is left, then they get SIGTERM. The prefix is fresh and
dropped at the end (``--keep`` leaves it for inspection). A JSON record of
every interval goes to bench/results/soak-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from venturi_bench import Prefix, WorkerProcess
from workload import database_url

RESULTS_DIR = Path(__file__).resolve().parent / "results"


class Enqueuer:
    """One thread calling ``.delay()`` on a fixed schedule of ``rate`` jobs per second.

    It never bursts to catch up more than one second of backlog: if the
    database cannot take the rate, the achieved rate shows it.
    """

    def __init__(self, prefix: Prefix, rate: float) -> None:
        self.prefix = prefix
        self.rate = rate
        self.enqueued = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-enqueuer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        gap = 1.0 / self.rate
        next_at = time.monotonic()
        n = 0
        while not self._stop.is_set():
            now = time.monotonic()
            if next_at > now:
                self._stop.wait(next_at - now)
                continue
            try:
                self.prefix.noop.delay(n)
                self.enqueued += 1
            except Exception:
                self.errors += 1
                self._stop.wait(0.5)
            n += 1
            next_at = max(next_at + gap, now - 1.0)


def table_stats(prefix: Prefix) -> dict[str, dict[str, int]]:
    rows = prefix.conn.execute(
        "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count "
        "FROM pg_stat_user_tables WHERE relname IN (%s, %s)",
        (f"{prefix.value}_jobs", f"{prefix.value}_journal"),
    ).fetchall()
    return {
        name.removeprefix(f"{prefix.value}_"): {"live": live, "dead": dead, "autovacuums": vacuums}
        for name, live, dead, vacuums in rows
    }


def status_counts(prefix: Prefix) -> tuple[dict[str, int], timedelta | None]:
    """Jobs per status over every kind, and the lag, from ``app.stats()``."""
    stats = prefix.app.stats()
    counts: dict[str, int] = {}
    for kind in stats.kinds:
        for status, count in kind.counts.items():
            counts[status.value] = counts.get(status.value, 0) + count
    return counts, stats.oldest_eligible_age


def sample(
    prefix: Prefix, workers: list[WorkerProcess], enqueuer: Enqueuer, last: dict[str, Any]
) -> dict[str, Any]:
    """One interval's figures; ``last`` carries the counters of the previous sample."""
    now = time.monotonic()
    newest_id = prefix.last_journal_id()
    completed = prefix.completed(after_id=last["journal_id"])
    counts, lag = status_counts(prefix)
    elapsed = now - last["at"]
    enqueued = enqueuer.enqueued
    record = {
        "t_s": round(now - last["start"], 1),
        "enqueued_per_s": round((enqueued - last["enqueued"]) / elapsed, 1),
        "completed_per_s": round(completed / elapsed, 1),
        "lag_s": round(lag.total_seconds(), 3) if lag is not None else 0.0,
        "pending": counts.get("pending", 0),
        "claimed": counts.get("claimed", 0),
        "completed_total": counts.get("completed", 0),
        "worker_rss_mib": [round(w.memory().get("VmRSS", 0) / 1024, 1) for w in workers],
        "tables": table_stats(prefix),
        "enqueue_errors": enqueuer.errors,
    }
    last.update(at=now, journal_id=newest_id, enqueued=enqueued)
    return record


def render(record: dict[str, Any]) -> str:
    tables = record["tables"]
    jobs, journal = tables.get("jobs", {}), tables.get("journal", {})
    return (
        f"{record['t_s']:7.1f}s  enq {record['enqueued_per_s']:7.1f}/s  "
        f"done {record['completed_per_s']:7.1f}/s  lag {record['lag_s']:7.3f}s  "
        f"pending {record['pending']:6d}  claimed {record['claimed']:3d}  "
        f"rss {','.join(f'{r:.1f}' for r in record['worker_rss_mib'])} MiB  "
        f"jobs live/dead {jobs.get('live', 0)}/{jobs.get('dead', 0)}  "
        f"journal live/dead {journal.get('live', 0)}/{journal.get('dead', 0)}"
        + (f"  cleaned {record['cleaned']}" if "cleaned" in record else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0, help="jobs enqueued per second")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between reports")
    parser.add_argument(
        "--cleanup-older-than",
        type=float,
        default=None,
        help="each interval, app.cleanup() terminal jobs older than this many seconds",
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--keep", action="store_true", help="do not drop the prefix at the end")
    args = parser.parse_args()
    if args.minutes <= 0 or args.rate <= 0 or args.workers < 1 or args.interval <= 0:
        parser.error("--minutes, --rate, --interval must be positive and --workers at least 1")

    url = database_url(args.database_url)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = RESULTS_DIR / f"soak-{stamp}"
    prefix = Prefix(url)
    print(
        f"soak: {args.minutes:g} min at {args.rate:g} jobs/s, {args.workers} worker(s) "
        f"x concurrency {args.concurrency}, prefix {prefix.value}",
        flush=True,
    )
    records: list[dict[str, Any]] = []
    workers: list[WorkerProcess] = []
    enqueuer = Enqueuer(prefix, args.rate)
    try:
        workers = [WorkerProcess(prefix, args.concurrency, log_dir) for _ in range(args.workers)]
        start = time.monotonic()
        last = {"start": start, "at": start, "journal_id": 0, "enqueued": 0}
        enqueuer.start()
        deadline = start + args.minutes * 60
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(args.interval, deadline - time.monotonic())))
            for worker in workers:
                worker.check_alive()
            record = sample(prefix, workers, enqueuer, last)
            if args.cleanup_older_than is not None:
                record["cleaned"] = prefix.app.cleanup(
                    older_than=timedelta(seconds=args.cleanup_older_than)
                )
            records.append(record)
            print(render(record), flush=True)
        enqueuer.stop()
        drained_by = time.monotonic() + 60
        while time.monotonic() < drained_by:
            stats = prefix.app.stats()
            if not any(
                k.counts.get(status, 0)
                for k in stats.kinds
                for status in k.counts
                if status.value in ("pending", "claimed")
            ):
                break
            time.sleep(1)
        final = sample(prefix, workers, enqueuer, last)
        print(f"after stopping the enqueuer: {render(final)}", flush=True)
        records.append({"final": final})
    finally:
        enqueuer.stop()
        for worker in workers:
            worker.stop()
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        output = RESULTS_DIR / f"soak-{stamp}.json"
        output.write_text(
            json.dumps(
                {"args": vars(args), "prefix": prefix.value, "records": records},
                indent=2,
                default=str,
            )
        )
        if args.keep:
            prefix.app.close()
            print(f"kept prefix {prefix.value}", file=sys.stderr)
        else:
            prefix.close()
        print(f"results: {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
