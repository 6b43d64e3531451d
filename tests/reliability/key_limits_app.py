"""The App of the per-key and shared-limit tests' worker subprocesses (ADR 0138).

Started as ``python -m venturi worker --app key_limits_app:app`` with this folder
on ``PYTHONPATH``; its database is ``$VENTURI_DATABASE_URL``, its prefix
``$CHAOS_PREFIX``. Every handler records its run in ``<prefix>_key_runs``
(the test creates it): its start and its end by the database clock, each in
its own autocommitted statement, so a run cut by SIGKILL leaves its start.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import psycopg

import venturi
from venturi.context import Context

LEASE = timedelta(seconds=2)
MAX_FAILURES = 1000
RUN_SECONDS = 0.1
SHARED_CAP = 2
RUNS_DDL = """
CREATE TABLE {prefix}_key_runs (
    id bigserial PRIMARY KEY, job_id text NOT NULL, run_no int NOT NULL, key text NOT NULL,
    started_at timestamptz NOT NULL, ended_at timestamptz
)
"""


def _run(ctx: Context, prefix: str, key: str) -> None:
    """One recorded run: start, a short wait, end (the end after the work, before the
    outcome is written: a recorded run is inside the claim that holds its slot)."""
    with psycopg.connect(os.environ["VENTURI_DATABASE_URL"], autocommit=True) as conn:
        row = conn.execute(
            f"INSERT INTO {prefix}_key_runs (job_id, run_no, key, started_at)"
            " VALUES (%s, %s, %s, clock_timestamp()) RETURNING id",
            (ctx.job_id, ctx.run_count, key),
        ).fetchone()
        assert row is not None
        threading.Event().wait(RUN_SECONDS)
        conn.execute(
            f"UPDATE {prefix}_key_runs SET ended_at = clock_timestamp() WHERE id = %s", (row[0],)
        )


def build_app(database_url: str | None, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    """The App and its tasks by kind."""
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    app.limit("pool", concurrency=SHARED_CAP)

    @app.task(
        kind="keys.one",
        lease=LEASE,
        max_failures=MAX_FAILURES,
        concurrency_key=lambda tenant, **_: tenant,
        key_concurrency=1,
    )
    def one(ctx: Context, tenant: str, n: int) -> int:
        _run(ctx, prefix, tenant)
        return n

    @app.task(kind="shared.a", lease=LEASE, max_failures=MAX_FAILURES, limits=["pool"])
    def shared_a(ctx: Context, n: int) -> int:
        _run(ctx, prefix, "pool")
        return n

    @app.task(kind="shared.b", lease=LEASE, max_failures=MAX_FAILURES, limits=["pool"])
    def shared_b(ctx: Context, n: int) -> int:
        _run(ctx, prefix, "pool")
        return n

    return app, {t.kind: t for t in (one, shared_a, shared_b)}


app, _tasks = build_app(None, os.environ.get("CHAOS_PREFIX", "keys_unset"))
