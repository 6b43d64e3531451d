"""Operations refuse out-of-range arguments with a typed error, before any SQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

import venturi
from venturi.errors import InvalidArgument, SchemaMissing


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_jobs_refuses_a_limit_out_of_range(app: venturi.App, limit: int) -> None:
    with pytest.raises(InvalidArgument, match="limit must be between 1 and 1000"):
        app.jobs(limit=limit)


def test_jobs_refuses_an_unknown_status(app: venturi.App) -> None:
    with pytest.raises(InvalidArgument, match="unknown status 'finished'"):
        app.jobs(status="finished")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"older_than": timedelta(days=-1)}, "older_than must not be negative"),
        ({"older_than": timedelta(days=1), "batch_size": 0}, "batch_size must be at least 1"),
        ({"older_than": timedelta(days=1), "status": "pending"}, "terminal jobs only"),
        ({"older_than": timedelta(days=1), "status": "claimed"}, "terminal jobs only"),
    ],
)
def test_cleanup_refuses_bad_arguments_and_deletes_nothing(
    app: venturi.App, db: object, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        app.cleanup(**kwargs)  # type: ignore[arg-type]


def test_an_unmigrated_prefix_says_to_migrate(database_url: str) -> None:
    app = venturi.App(database_url, prefix="never_migrated_here", set_as_current=False)
    try:
        with pytest.raises(SchemaMissing, match="run `venturi migrate`"):
            app.stats()
    finally:
        app.close()
