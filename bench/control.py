"""What control at run time costs the claim, and how fast a pause stops claims (ADR 0139).

- **claim**: the claim statement with its pause check (``claim_jobs`` as shipped)
  against the same statement with the check taken out (the text before ADR 0139,
  derived from the shipped one here, so the two differ by exactly the check), on one
  claim session (``configure_claim_session``, prepared: the claim pool's generic
  plan), ``--claims`` claims of 8 each from a backlog, the two statements alternating
  claim by claim (lockstep), each claim's batch completed outside the clock. Three
  states of ``_kind_controls``: empty (nothing ever paused), ``--controls`` rows of
  other kinds (paused and overridden), and the same with the served kind's own row,
  active. An A/A pair (the baseline in both turns) gives the noise floor. The whole
  measurement runs twice, the kinds swapped.
- **path**: the same comparison through ``PostgresBackend.claim`` (the pool, the
  claim's JSON input, the rows made jobs): two backends on one prefix, one with its
  ``claim_jobs`` replaced by the text without the check (and a third, the same, for
  an A/A floor), taking turns claim by claim,
  ``_kind_controls`` empty (nothing paused, nothing overridden: the case the issue
  bounds at 5%), both kind orders.
- **pause**: a worker (in process, ``--concurrency``, no claim-ahead) draining a
  steady stream of a kind; ``app.pause_kind`` at a random moment; the time from the
  pause's commit to the last start of a job of the kind (a job started before the
  commit counts as 0). ``--trials`` trials; median, p99 and max.

    python bench/control.py [--database-url URL] [--claims 1500] [--controls 100]
                            [--trials 200] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import secrets
import statistics
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from workload import database_url, drop_prefix

import venturi
from venturi.postgres import PostgresBackend
from venturi.postgres.backend import claim_input
from venturi.postgres.sessions import configure_claim_session
from venturi.worker import Worker

LEASE = timedelta(minutes=5)
KINDS = ("bench.a", "bench.b")
#: The path section's third side: the text without the check again, its own kind.
KINDS_AA = "bench.c"

#: The pause check of claim_jobs (ADR 0139), as the shipped text has it.
_GATE = """    CROSS JOIN LATERAL (
        SELECT NOT EXISTS (
            SELECT 1 FROM {{prefix}}_kind_controls AS s WHERE s.kind = k.kind AND s.paused
        ) AS is_active
    ) AS a
"""
_GATED = "          AND a.is_active\n"


def without_pause_check(sql: str, prefix: str) -> str:
    """The claim statement before ADR 0139: the shipped one with its check taken out."""
    gate = _GATE.replace("{{prefix}}", prefix)
    if gate not in sql or _GATED not in sql:
        raise SystemExit("claim_jobs no longer has the pause check this bench removes")
    return sql.replace(gate, "").replace(_GATED, "")


def _numbered(sql: str) -> tuple[str, list[str]]:
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    for i, name in enumerate(names, 1):
        sql = sql.replace(f"%({name})s", f"${i}")
    return sql, names


_TYPES = {
    "kinds": "json",
    "horizon": "interval",
    "limit": "bigint",
    "worker_id": "text",
    "lease": "interval",
}


def claim_costs(url: str, claims: int, controls: int) -> dict[str, dict[str, float]]:
    """Median ms per claim of 8 of each statement pair, per state of _kind_controls."""
    prefix = f"bench_c_{secrets.token_hex(3)}"
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    app.migrate()
    results: dict[str, dict[str, float]] = {}
    try:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            shipped = app.backend._queries.claim_jobs.sql  # type: ignore[attr-defined]
            statements = {"with check": shipped, "without": without_pause_check(shipped, prefix)}
            configure_claim_session(conn)
            for name, sql in statements.items():
                numbered, names = _numbered(sql)
                types = ", ".join(_TYPES[n] for n in names)
                conn.execute(f"PREPARE {name.replace(' ', '_')} ({types}) AS {numbered}")
            states: list[tuple[str, Callable[[], None]]] = [
                ("empty", lambda: None),
                (f"{controls} other kinds' rows", lambda: _other_rows(conn, prefix, controls)),
                ("and the kind's own row, active", lambda: _own_rows(conn, prefix)),
            ]
            for state, prepare in states:
                prepare()
                conn.execute(f"VACUUM ANALYZE {prefix}_kind_controls")
                for order in (KINDS, KINDS[::-1]):
                    pairs = {
                        "with check / without": ("with_check", "without"),
                        "A/A (without / without)": ("without", "without"),
                    }
                    for label, pair in pairs.items():
                        first, second = _lockstep(conn, prefix, pair, order, claims, names)
                        row = results.setdefault(f"{state}: {label}", {"a": 0.0, "b": 0.0})
                        row["a"] += first / 2
                        row["b"] += second / 2
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return results


def _other_rows(conn: psycopg.Connection[Any], prefix: str, count: int) -> None:
    conn.execute(
        f"INSERT INTO {prefix}_kind_controls (kind, paused, global_concurrency)"
        " SELECT 'other.' || n, n %% 2 = 0, 3 FROM generate_series(1, %s) AS n",
        (count,),
    )


def _own_rows(conn: psycopg.Connection[Any], prefix: str) -> None:
    conn.execute(
        f"INSERT INTO {prefix}_kind_controls (kind, paused)"
        " SELECT k, false FROM unnest(%s::text[]) AS k",
        (list(KINDS),),
    )


def _lockstep(
    conn: psycopg.Connection[Any],
    prefix: str,
    pair: tuple[str, str],
    kinds: tuple[str, str],
    claims: int,
    names: list[str],
) -> tuple[float, float]:
    """Median ms of ``claims`` claims of 8 per side: side i claims from ``kinds[i]``."""
    for kind in kinds:
        conn.execute(
            f"INSERT INTO {prefix}_jobs (id, kind, payload, status, created_at, visible_at)"
            " SELECT %s || lpad(n::text, 8, '0'), %s, '{}', 'pending', now(), now()"
            " FROM generate_series(1, %s) AS n",
            (secrets.token_hex(4), kind, claims * 8),
        )
    conn.execute(f"VACUUM ANALYZE {prefix}_jobs")
    times: list[list[float]] = [[], []]
    placeholders = ", ".join(["%s"] * len(names))
    for _ in range(claims):
        for side in (0, 1):
            params = {
                "kinds": claim_input([kinds[side]], [8]),
                "horizon": timedelta(0),
                "limit": 8,
                "worker_id": "bench",
                "lease": LEASE,
            }
            cursor = psycopg.ClientCursor(conn)
            started = time.perf_counter()
            cursor.execute(
                f"EXECUTE {pair[side]} ({placeholders})", [params[n] for n in names]
            )
            rows = cursor.fetchall()
            times[side].append(time.perf_counter() - started)
            conn.execute(
                f"UPDATE {prefix}_jobs SET status = 'completed', finished_at = now(),"
                " claim_expires_at = NULL WHERE id = ANY(%s)",
                ([r["id"] for r in rows],),
            )
    conn.execute(f"DELETE FROM {prefix}_jobs")
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000


def path_costs(url: str, claims: int) -> dict[str, float]:
    """Median ms per ``backend.claim`` of 8, with the check and without, both orders."""
    prefix = f"bench_q_{secrets.token_hex(3)}"
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    app.migrate()
    shipped = PostgresBackend(url, prefix=prefix)
    before = PostgresBackend(url, prefix=prefix)
    control = PostgresBackend(url, prefix=prefix)
    for backend in (before, control):
        queries = backend._queries._queries  # type: ignore[attr-defined]
        queries["claim_jobs"] = dataclasses.replace(
            queries["claim_jobs"], sql=without_pause_check(queries["claim_jobs"].sql, prefix)
        )
    totals = {"with check": 0.0, "without": 0.0, "without (A/A)": 0.0}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for order in (KINDS, KINDS[::-1]):
                for kind in (*order, KINDS_AA):
                    conn.execute(
                        f"INSERT INTO {prefix}_jobs (id, kind, payload, status, created_at,"
                        " visible_at) SELECT %s || lpad(n::text, 8, '0'), %s, '{}', 'pending',"
                        " now(), now() FROM generate_series(1, %s) AS n",
                        (secrets.token_hex(4), kind, claims * 8),
                    )
                conn.execute(f"VACUUM ANALYZE {prefix}_jobs")
                sides = {
                    "with check": (shipped, order[0]),
                    "without": (before, order[1]),
                    "without (A/A)": (control, KINDS_AA),
                }
                times: dict[str, list[float]] = {name: [] for name in sides}
                for _ in range(claims):
                    for name, (backend, kind) in sides.items():
                        started = time.perf_counter()
                        jobs = backend.claim(kinds=[kind], limit=8, worker_id="b", lease=LEASE)
                        times[name].append(time.perf_counter() - started)
                        conn.execute(
                            f"UPDATE {prefix}_jobs SET status = 'completed',"
                            " finished_at = now(), claim_expires_at = NULL WHERE id = ANY(%s)",
                            ([job.claim.job_id for job in jobs],),
                        )
                for name, values in times.items():
                    totals[name] += statistics.median(values) * 1000 / 2
                conn.execute(f"DELETE FROM {prefix}_jobs")
    finally:
        for backend in (shipped, before, control):
            backend.close()
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return totals


def pause_latencies(url: str, trials: int, concurrency: int) -> list[float]:
    """Seconds from each pause's commit to the kind's last start after it (0: none)."""
    prefix = f"bench_p_{secrets.token_hex(3)}"
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    app.migrate()
    starts: list[float] = []
    lock = threading.Lock()

    @app.task(kind="bench.paused")
    def work(n: int) -> None:
        with lock:
            starts.append(time.time())

    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            work.delay_many([{"n": n} for n in range(20)])
            stop.wait(0.01)

    worker = Worker(app, concurrency=concurrency, prefetch=0, poll_interval=1.0)
    feeder = threading.Thread(target=feed, daemon=True)
    latencies: list[float] = []
    try:
        worker.start()
        feeder.start()
        for _ in range(trials):
            app.resume_kind("bench.paused")
            time.sleep(0.15 + random.random() * 0.15)
            app.pause_kind("bench.paused")
            committed = time.time()
            time.sleep(0.3)
            with lock:
                after = [at - committed for at in starts if at > committed]
                starts.clear()
            latencies.append(max(after, default=0.0))
            app.cancel_matching(kind="bench.paused", note=None)
    finally:
        stop.set()
        feeder.join(5)
        worker.stop(grace=5)
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            drop_prefix(conn, prefix)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--claims", type=int, default=1500)
    parser.add_argument("--controls", type=int, default=100)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sections", default="claim,path,pause")
    args = parser.parse_args()
    args.database_url = database_url(args.database_url)
    sections = set(args.sections.split(","))
    if "claim" in sections:
        print("claim of 8, median ms (mean of both kind orders)")
        for label, row in claim_costs(args.database_url, args.claims, args.controls).items():
            print(f"  {label:55} {row['a']:.3f} / {row['b']:.3f}  ratio {row['a'] / row['b']:.3f}")
    if "path" in sections:
        costs = path_costs(args.database_url, args.claims)
        with_check, without, again = costs.values()
        print(
            f"backend.claim of 8, median ms: with the check {with_check:.3f}, without"
            f" {without:.3f} (ratio {with_check / without:.3f}), without again {again:.3f}"
            f" (A/A ratio {again / without:.3f})"
        )
    if "pause" in sections:
        latencies = sorted(pause_latencies(args.database_url, args.trials, args.concurrency))
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(
            f"pause -> last start, {len(latencies)} trials: median "
            f"{statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms,"
            f" max {latencies[-1] * 1000:.1f} ms;"
            f" {sum(1 for x in latencies if x > 0)} trials had a start after the commit"
        )


if __name__ == "__main__":
    main()
