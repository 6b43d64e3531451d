"""The raw pickup baseline: a hand-written LISTEN/NOTIFY queue, measured as venturi's pickup is.

The enqueuer (this process) writes one row and its wake-up in one autocommit
statement (an INSERT and ``pg_notify`` together, as ``.delay()`` does),
``time.time()`` taken just before, on the minimal table of
``baseline.RawQueue`` (``schema="minimal"``) or on the seed's own tables and
indexes (``schema="seed"``, ``baseline.SeedPrefix``: the same raw statements
on the schema venturi writes, issue 34). The listener is a subprocess of its
own (as venturi's worker is): one connection, LISTENing; on each
notification it claims with the same ``FOR UPDATE SKIP LOCKED`` statement as
the raw drain until nothing is left (on the seed tables: with the claim's
owner, run count and lease, ``baseline._SCHEMA_CLAIM``), and for each
claimed row takes ``time.time()`` (the "handler start") and stores it as the
row's ``finished_at``. Latency = that start minus the enqueue time, same
host, same clock, per probe: p50/p95/p99 as venturi's. The listener also
reports, per probe, when it was woken and when its claim began and ended
(``parts_ms``, the same names as venturi's).

    python bench/raw_pickup.py listen --database-url URL --table T [--schema seed]
    python bench/raw_pickup.py pairs [--trees a=/path,b=/path] [--rounds 4]

``pairs`` measures in turn, round after round, the raw loop on both schemas
and venturi's pickup (``venturi_bench.pickup_latency``) with each tree on the
worker's ``PYTHONPATH``, and prints every round and the median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from baseline import _CLAIM, _SCHEMA_CLAIM, _WORKER, RawQueue, SeedPrefix, _payload
from ulid import ULID
from workload import NOOP_KIND, connect, database_url, percentile, wait_until

_ENQUEUE = (
    "WITH j AS (INSERT INTO {t} (kind, payload) VALUES (%s, %s) RETURNING id) "
    "SELECT pg_notify('{t}', '') FROM j"
)
_STARTED = "UPDATE {t} SET status = 'completed', finished_at = to_timestamp(%s) WHERE id = %s"
_SEED_ENQUEUE = (
    "WITH j AS (INSERT INTO {t} (id, kind, payload, priority, status, created_at, visible_at) "
    "VALUES (%s, %s, %s, 1, 'pending', now(), now()) RETURNING id) "
    "SELECT pg_notify('{t}', '') FROM j"
)
_SEED_STARTED = (
    "UPDATE {t} SET status = 'completed', finished_at = to_timestamp(%s), "
    "claimed_by = NULL, claim_expires_at = NULL WHERE id = %s AND claimed_by = %s"
)
SCHEMAS = ("minimal", "seed")


def listen(url: str, table: str, schema: str = "minimal") -> None:
    """The listener loop; runs until it is killed or its parent process is gone. Writes
    one line per claimed row to stdout: its id, when the loop was woken, when the claim
    began and ended (wall clock)."""
    parent = os.getppid()
    if schema == "seed":
        claim = _SCHEMA_CLAIM.replace("{p}_jobs", table)
        started = _SEED_STARTED.format(t=table)
        claim_args: tuple[Any, ...] = (_WORKER, 1)
        owner: tuple[str, ...] = (_WORKER,)  # the start is fenced on the claim's owner
    else:
        claim, started, claim_args = _CLAIM.format(t=table), _STARTED.format(t=table), (1,)
        owner = ()
    with connect(url) as conn, connect(url) as work:
        conn.execute(f'LISTEN "{table}"')
        sys.stdout.write("listening\n")
        sys.stdout.flush()
        woken = 0.0
        while True:
            while True:
                began = time.time()
                rows = work.execute(claim, claim_args).fetchall()
                ended = time.time()
                if not rows:
                    break
                for row in rows:
                    at = time.time()
                    work.execute(started, (at, row[0], *owner))
                    sys.stdout.write(f"{row[0]} {woken} {began} {ended}\n")
                sys.stdout.flush()
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                break
            woken = time.time()
            if os.getppid() != parent:
                return


class _SeedQueue:
    """The seed's tables under a fresh prefix, as the listener and the enqueuer use them."""

    def __init__(self, url: str) -> None:
        self._prefix = SeedPrefix(url)
        self.conn = self._prefix.conn
        self.table = f"{self._prefix.value}_jobs"

    def sql(self, template: str) -> str:
        return template.format(t=self.table)

    def close(self) -> None:
        self._prefix.close()


def measure(url: str, probes: int, gap: float, schema: str = "minimal") -> dict[str, Any]:
    """``probes`` enqueues ``gap`` seconds apart with the listener idle; latency percentiles
    and ``parts_ms`` (medians: to the wake-up, to the claim, the claim)."""
    queue: RawQueue | _SeedQueue = _SeedQueue(url) if schema == "seed" else RawQueue(url)
    listener = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "listen",
            "--database-url",
            url,
            "--table",
            queue.table,
            "--schema",
            schema,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None
        if listener.stdout.readline().strip() != "listening":
            raise RuntimeError("raw listener did not start")
        if schema == "seed":
            template, make_id = _SEED_ENQUEUE, True
        else:
            template, make_id = _ENQUEUE, False
        enqueue = queue.sql(template)

        def insert(n: int) -> None:
            args = (NOOP_KIND, _payload(n))
            queue.conn.execute(enqueue, (str(ULID()), *args) if make_id else args)

        insert(-1)  # warm-up, untimed
        time.sleep(1.0)
        enqueued: dict[int, float] = {}
        for n in range(probes):
            before = time.time()
            insert(n)
            enqueued[n] = before
            time.sleep(gap)
        done = wait_until(lambda: _count_started(queue) == probes + 1, timeout=60, interval=0.1)
        if not done:
            raise RuntimeError("raw listener did not pick up every probe")
        rows = queue.conn.execute(
            queue.sql(
                "SELECT id::text, (payload->>'n')::int, extract(epoch FROM finished_at) FROM {t}"
            )
        ).fetchall()
    finally:
        listener.kill()
        reported = listener.communicate(timeout=10)[0] if listener.stdout else ""
        queue.close()
    latencies = [(float(at) - enqueued[n]) * 1000 for _, n, at in rows if n in enqueued]
    return {
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "probes": len(latencies),
        "parts_ms": _parts(rows, enqueued, reported),
    }


def _parts(rows: list[Any], enqueued: dict[int, float], reported: str) -> dict[str, float]:
    """Medians of each probe's path as venturi's pickup splits it (no hand-off here: the
    loop's own ``time.time()`` after the claim is the start)."""
    claims = {}
    for line in reported.splitlines():
        fields = line.split()
        if len(fields) == 4:
            claims[fields[0]] = tuple(float(f) for f in fields[1:])
    parts = []
    for job_id, n, _ in rows:
        if n in enqueued and job_id in claims:
            woken, began, ended = claims[job_id]
            if woken >= enqueued[n]:
                at = enqueued[n]
                parts.append((began - at, woken - at, began - woken, ended - began))
    names = ("to_claim", "to_wake", "wake_to_claim", "claim")
    if not parts:
        return {}
    return {
        name: round(percentile([p[i] * 1000 for p in parts], 50), 3) for i, name in enumerate(names)
    }


def _count_started(queue: RawQueue | _SeedQueue) -> int:
    row = queue.conn.execute(
        queue.sql("SELECT count(*) FROM {t} WHERE status = 'completed'")
    ).fetchone()
    return int(row[0]) if row else 0


def pairs(url: str, trees: dict[str, str], rounds: int, probes: int, gap: float) -> None:
    """Every round: the raw loop on each schema, then venturi with each tree, in turn
    (the order of the trees alternates); prints each round, then the medians of them."""
    import venturi_bench

    log_dir = Path(__file__).resolve().parent / "results" / f"pickup-pairs-{time.time_ns()}"
    names = list(trees)
    samples: dict[str, list[dict[str, Any]]] = {}
    for n in range(rounds):
        order = names if n % 2 == 0 else names[::-1]
        runs: list[tuple[str, Any]] = [
            (f"raw {schema}", lambda schema=schema: measure(url, probes, gap, schema))
            for schema in SCHEMAS
        ]
        for name in order:
            env = {**os.environ, "PYTHONPATH": trees[name], "PYTHONUNBUFFERED": "1"}
            runs.append(
                (
                    f"venturi {name}",
                    lambda env=env: venturi_bench.pickup_latency(url, probes, gap, log_dir, env),
                )
            )
        for label, run in runs:
            result = run()
            samples.setdefault(label, []).append(result)
            sys.stdout.write(f"round {n + 1} {label:16} {_line(result)}\n")
            sys.stdout.flush()
    sys.stdout.write(f"median of {rounds} rounds:\n")
    for label, results in samples.items():
        sys.stdout.write(f"  {label:16} {_line(_median(results))}\n")
    sys.stdout.write(json.dumps(samples) + "\n")


def _median(results: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("p50_ms", "p95_ms", "p99_ms")
    out: dict[str, Any] = {k: statistics.median(r[k] for r in results) for k in keys}
    parts = [r["parts_ms"] for r in results if isinstance(r.get("parts_ms"), dict)]
    names = {name for p in parts for name in p}
    out["parts_ms"] = {
        name: round(statistics.median(p[name] for p in parts if name in p), 3) for name in names
    }
    return out


def _line(result: dict[str, Any]) -> str:
    parts = result.get("parts_ms")
    split = " ".join(f"{k}={v:.2f}" for k, v in parts.items()) if isinstance(parts, dict) else parts
    return (
        f"p50 {result['p50_ms']:.2f} p95 {result['p95_ms']:.2f} p99 {result['p99_ms']:.2f} ms"
        f"  [{split}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["listen", "pairs"])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--table")
    parser.add_argument("--schema", choices=SCHEMAS, default="minimal")
    parser.add_argument(
        "--trees",
        default=f"this={Path(__file__).resolve().parent.parent}",
        help="name=path,...: the trees whose venturi the worker imports, in turn",
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--gap", type=float, default=0.020)
    args = parser.parse_args()
    url = database_url(args.database_url)
    if args.role == "listen":
        listen(url, args.table, args.schema)
        return
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    pairs(url, trees, args.rounds, args.probes, args.gap)


if __name__ == "__main__":
    main()
