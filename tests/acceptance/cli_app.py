"""A user's App for the CLI acceptance tests, loaded with ``--app cli_app:app``.

Its database comes from ``$VENTURI_DATABASE_URL`` and its prefix from
``$CLI_TEST_PREFIX``; a test may point it elsewhere with ``--prefix``.
"""

from __future__ import annotations

import os

import venturi

app = venturi.App(prefix=os.environ.get("CLI_TEST_PREFIX", "cli_unset"))


@app.task(kind="cli.double")
def double(n: int) -> int:
    return n * 2


@app.task(kind="cli.tick", schedule="* * * * *")
def tick() -> None:
    """Every minute; only the beat test runs beat."""
