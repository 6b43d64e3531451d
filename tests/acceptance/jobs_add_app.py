"""A user's App for the ``venturi jobs add`` acceptance tests (``--app jobs_add_app:app``).

Its database comes from ``$VENTURI_DATABASE_URL``, its prefix from ``--prefix``.
"""

from __future__ import annotations

import venturi

app = venturi.App(prefix="jobs_add_unset")


@app.task(kind="add.mail", priority=venturi.Priority.LOW)
def mail(to: str, subject: str = "hello", copies: int = 1) -> None:
    """Not run here: the tests only look at the rows ``jobs add`` writes."""


@app.task(kind="add.sync", dedup=lambda account: account)
def sync(account: str) -> None:
    """Deduplicated on the account: a second ``jobs add`` merges into the first."""


@app.task(kind="add.ping")
def ping() -> None:
    """No arguments: ``jobs add add.ping`` needs no JSON."""
