"""The App of the workflow crash test's worker subprocesses (``workflow_app:app``).

Its prefix is ``$CHAOS_PREFIX`` (set by the test, as for ``chaos_app``); the test
imports ``build_app`` to enqueue on the same prefix. A member takes 50 ms so the
group lasts long enough to be interrupted on any machine; the callback
records each of its runs in its own table, so the test can count them even if
a run were repeated. Short leases bring a killed worker's claims back within
seconds, and a backstop far above the chaos keeps every step alive.
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
#: Bounds the group's duration from below, however fast the finish: 1,000 members
#: x 50 ms over 3 workers x 4 handlers is about 4 s, four kills at one a second.
MEMBER_SECONDS = 0.05
PREFIX_ENV = "CHAOS_PREFIX"
DATABASE_URL_ENV = "VENTURI_DATABASE_URL"


def build_app(database_url: str | None, prefix: str) -> tuple[venturi.App, Any, Any]:
    """The App, its member ``flow.member(n)`` and its callback ``flow.collect(values)``."""
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)

    @app.task(kind="flow.member", lease=LEASE, max_failures=MAX_FAILURES)
    def member(n: int) -> int:
        threading.Event().wait(MEMBER_SECONDS)
        return n

    @app.task(kind="flow.collect", lease=LEASE, max_failures=MAX_FAILURES)
    def collect(ctx: Context, values: list[int]) -> int:
        # A run's side effect outside the queue's tables: one row per run.
        url = database_url or os.environ[DATABASE_URL_ENV]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {prefix}_callback_runs (job_id, run_count, members, total)"
                " VALUES (%s, %s, %s, %s)",
                (ctx.job_id, ctx.run_count, len(values), sum(values)),
            )
        return sum(values)

    return app, member, collect


app, _member, _collect = build_app(None, os.environ.get(PREFIX_ENV, "chaos_unset"))
