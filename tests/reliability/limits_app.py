"""The App of the limits-across-workers tests' worker subprocesses (ADR 0128).

Started as ``python -m venturi worker --app limits_app:app`` with this folder on
``PYTHONPATH``; its prefix is ``$LIMITS_PREFIX`` and every handler appends
``<kind> <n> <wall clock>`` to ``$LIMITS_STARTS`` as it starts, so a test can
see when each job started in whichever process ran it.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from typing import Any

import venturi

LEASE = timedelta(seconds=2)
CAP = 2
RATE = "10/s"


def _started(kind: str, n: int) -> None:
    with open(os.environ["LIMITS_STARTS"], "a", encoding="utf-8") as starts:
        starts.write(f"{kind} {n} {time.time()}\n")


def build_app(database_url: str | None, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    """The App and its tasks by kind."""
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)

    @app.task(kind="limits.capped", lease=LEASE, global_concurrency=CAP)
    def capped(n: int, seconds: float = 0.2) -> int:
        _started("limits.capped", n)
        threading.Event().wait(seconds)
        return n

    @app.task(kind="limits.rated", lease=LEASE, rate_limit=RATE)
    def rated(n: int) -> int:
        _started("limits.rated", n)
        return n

    @app.task(kind="limits.free", lease=LEASE)
    def free(n: int) -> int:
        _started("limits.free", n)
        return n

    return app, {t.kind: t for t in (capped, rated, free)}


app, _tasks = build_app(None, os.environ.get("LIMITS_PREFIX", "limits_unset"))
