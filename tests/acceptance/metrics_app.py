"""A worker's App for the metrics test, loaded with ``--app metrics_app:app``."""

from __future__ import annotations

import os

import venturi

app = venturi.App(prefix=os.environ.get("CLI_TEST_PREFIX", "cli_unset"))


@app.task(kind="metrics.work", max_failures=2, backoff=0)
def work(n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    return n
