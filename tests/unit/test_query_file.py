"""queries.sql is parsed strictly: names, cardinality and bodies."""

from __future__ import annotations

import pytest

from venturi.backend import Backend
from venturi.naming import Prefix
from venturi.postgres.queries import Queries, QueryFileError, parse_queries


def test_every_statement_parses_with_its_cardinality() -> None:
    queries = Queries(Prefix.parse("venturi"))
    assert "claim_jobs" in queries.names()
    assert queries.claim_jobs.cardinality == "many"
    assert "{{prefix}}" not in queries.claim_jobs.sql
    assert "venturi_jobs" in queries.claim_jobs.sql


def test_no_statement_formats_values_into_sql() -> None:
    for name in Queries(Prefix.parse("venturi")).names():
        sql = getattr(Queries(Prefix.parse("venturi")), name).sql
        assert "{" not in sql and "%s" not in sql, name


def test_lifecycle_verbs_have_statements_named_after_them() -> None:
    names = Queries(Prefix.parse("venturi")).names()
    for verb in (
        "renew_leases",
        "recover_stale",
        "time_until_visible",
        "list_jobs",
        "get_job",
        "stats",
    ):
        assert verb in names
        assert hasattr(Backend, verb)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT 1", "no '-- name:' headers"),
        ("-- name: a :one\n-- only a comment\n", "has no SQL"),
        ("-- name: a :one\nSELECT 1\n-- name: a :one\nSELECT 2\n", "defined twice"),
    ],
)
def test_malformed_query_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(QueryFileError, match=message):
        parse_queries(text)


def test_calling_a_query_with_the_wrong_cardinality_is_refused() -> None:
    query = parse_queries("-- name: a :exec\nSELECT 1\n")["a"]
    with pytest.raises(QueryFileError, match="declared :exec, called as :one"):
        query.one(None)  # type: ignore[arg-type]
