"""The raw pickup baseline: a hand-written LISTEN/NOTIFY queue, measured as venturi's pickup is.

The enqueuer (this process) writes one row and its wake-up in one autocommit
statement (an INSERT and ``pg_notify`` together, as ``.delay()`` does) on the
minimal table of ``baseline.RawQueue``, ``time.time()`` taken just before.
The listener is a subprocess of its own (as venturi's worker is): one
connection, LISTENing; on each notification it claims with the same
``FOR UPDATE SKIP LOCKED`` statement as the raw drain until nothing is left,
and for each claimed row takes ``time.time()`` (the "handler start") and
stores it as the row's ``finished_at``. Latency = that start minus the
enqueue time, same host, same clock, per probe: p50/p95/p99 as venturi's.

    python bench/raw_pickup.py listen --database-url URL --table T   (the listener)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from baseline import _CLAIM, RawQueue, _payload
from workload import NOOP_KIND, connect, percentile, wait_until

_ENQUEUE = (
    "WITH j AS (INSERT INTO {t} (kind, payload) VALUES (%s, %s) RETURNING id) "
    "SELECT pg_notify('{t}', '') FROM j"
)
_STARTED = "UPDATE {t} SET status = 'completed', finished_at = to_timestamp(%s) WHERE id = %s"


def listen(url: str, table: str) -> None:
    """The listener loop; runs until it is killed or its parent process is gone."""
    parent = os.getppid()
    claim = _CLAIM.format(t=table)
    started = _STARTED.format(t=table)
    with connect(url) as conn, connect(url) as work:
        conn.execute(f'LISTEN "{table}"')
        sys.stdout.write("listening\n")
        sys.stdout.flush()
        while True:
            while rows := work.execute(claim, (1,)).fetchall():
                for row in rows:
                    work.execute(started, (time.time(), row[0]))
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                break
            if os.getppid() != parent:
                return


def measure(url: str, probes: int, gap: float) -> dict[str, Any]:
    """``probes`` enqueues ``gap`` seconds apart with the listener idle; latency percentiles."""
    queue = RawQueue(url)
    listener = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "listen",
            "--database-url",
            url,
            "--table",
            queue.table,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert listener.stdout is not None
        if listener.stdout.readline().strip() != b"listening":
            raise RuntimeError("raw listener did not start")
        enqueue = queue.sql(_ENQUEUE)
        queue.conn.execute(enqueue, (NOOP_KIND, _payload(-1)))  # warm-up, untimed
        time.sleep(1.0)
        enqueued: dict[int, float] = {}
        for n in range(probes):
            before = time.time()
            queue.conn.execute(enqueue, (NOOP_KIND, _payload(n)))
            enqueued[n] = before
            time.sleep(gap)
        done = wait_until(lambda: _count_started(queue) == probes + 1, timeout=60, interval=0.1)
        if not done:
            raise RuntimeError("raw listener did not pick up every probe")
        rows = queue.conn.execute(
            queue.sql("SELECT (payload->>'n')::int, extract(epoch FROM finished_at) FROM {t}")
        ).fetchall()
    finally:
        listener.kill()
        listener.wait(timeout=10)
        queue.close()
    latencies = [(float(at) - enqueued[n]) * 1000 for n, at in rows if n in enqueued]
    return {
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "probes": len(latencies),
    }


def _count_started(queue: RawQueue) -> int:
    row = queue.conn.execute(
        queue.sql("SELECT count(*) FROM {t} WHERE status = 'completed'")
    ).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["listen"])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--table", required=True)
    args = parser.parse_args()
    listen(args.database_url, args.table)


if __name__ == "__main__":
    main()
