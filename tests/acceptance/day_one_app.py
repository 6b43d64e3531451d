"""A user's App for the day-one acceptance tests (``--app day_one_app:app``).

Its database comes from ``$VENTURI_DATABASE_URL`` and its prefix from
``$CLI_TEST_PREFIX``.
"""

from __future__ import annotations

import os
from datetime import timedelta

import venturi

app = venturi.App(prefix=os.environ.get("CLI_TEST_PREFIX", "day_one_unset"))


@app.task(kind="day.ok")
def ok(n: int) -> int:
    return n


@app.task(
    kind="day.flaky",
    max_failures=3,
    backoff=venturi.Exponential(base=timedelta(milliseconds=50), cap=timedelta(milliseconds=50)),
)
def flaky() -> None:
    raise ConnectionError("upstream refused")


@app.task(kind="day.fatal")
def fatal() -> None:
    raise venturi.Fail("bad input")
