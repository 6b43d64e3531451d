"""A worker process for the kill and signal tests: ``python worker_process.py``.

The test imports ``build_app`` to enqueue on the same prefix, then runs this
file as a subprocess, configured through the environment:

- ``WORKER_TEST_DATABASE_URL``, ``WORKER_TEST_PREFIX``: where the queue is;
- ``WORKER_TEST_GRACE``: the worker's grace period in seconds (default 30);
- ``WORKER_TEST_STALL=1``: jobs ``n`` with ``n % 100 == 50`` hang, so that the
  process is certainly holding claims when it is killed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from contextlib import closing
from datetime import timedelta
from typing import Any

import venturi
from venturi.worker import Worker

#: Short leases and a quick sweep, so a second worker recovers a killed one's
#: jobs within seconds.
LEASE = timedelta(seconds=2)
RECOVERY_INTERVAL = 1.0


def build_app(database_url: str, prefix: str) -> tuple[venturi.App, Any, Any]:
    """The App and its two tasks: ``kill.work(n)`` and ``kill.hang()``."""
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    stall = os.environ.get("WORKER_TEST_STALL") == "1"

    @app.task(kind="kill.work", lease=LEASE)
    def work(n: int) -> int:
        if stall and n % 100 == 50:
            threading.Event().wait(60)
        else:
            threading.Event().wait(0.005)  # a little work, so runs overlap
        return n

    @app.task(kind="kill.hang", lease=LEASE)
    def hang() -> None:
        threading.Event().wait(60)

    return app, work, hang


def main() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    app, _, _ = build_app(os.environ["WORKER_TEST_DATABASE_URL"], os.environ["WORKER_TEST_PREFIX"])
    with closing(app):
        Worker(
            app,
            concurrency=8,
            grace=float(os.environ.get("WORKER_TEST_GRACE", "30")),
            poll_interval=1.0,
            recovery_interval=RECOVERY_INTERVAL,
        ).run()


if __name__ == "__main__":
    main()
