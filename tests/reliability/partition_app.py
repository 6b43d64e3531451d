"""The App of the partition test's worker subprocesses: chaos_app's ``chaos.work``
on a backend whose worker statements wait at most ``REPLY_TIMEOUT`` for a reply.

The default bound (30 s) would make the test wait that long before the
cut-off worker notices; the mechanism is the same at any bound.
"""

from __future__ import annotations

import os
import threading

from chaos_app import LEASE, MAX_FAILURES, PREFIX_ENV, WORK_SECONDS

import venturi
from venturi.postgres import PostgresBackend

REPLY_TIMEOUT = 2.0

_prefix = os.environ.get(PREFIX_ENV, "chaos_unset")
app = venturi.App(
    prefix=_prefix,
    backend=PostgresBackend(
        os.environ.get("VENTURI_DATABASE_URL", ""),
        prefix=_prefix,
        reply_timeout=REPLY_TIMEOUT,
        connect_timeout=2.0,
    ),
    set_as_current=False,
)


@app.task(kind="chaos.work", lease=LEASE, max_failures=MAX_FAILURES)
def work(n: int) -> int:
    threading.Event().wait(WORK_SECONDS)
    return n
