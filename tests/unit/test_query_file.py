"""queries.sql is parsed strictly: names, cardinality and bodies; statements that share
SQL by design keep it equal."""

from __future__ import annotations

import re

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


#: A top-level common table expression's opening (``WITH [RECURSIVE] name AS (`` or
#: ``), name AS (``), at the start of a line.
_CTE = re.compile(r"^(?:WITH (?:RECURSIVE )?|\), )(\w+)(?:\([^)]*\))? AS \(\n", re.M)


def ctes(sql: str) -> dict[str, str]:
    """A statement's top-level CTE bodies by name, and ``select``: what follows the last."""
    heads = list(_CTE.finditer(sql))
    parts = {
        head[1]: sql[head.end() : nxt.start() if nxt else sql.rindex("\n)\n") + 1]
        for head, nxt in zip(heads, [*heads[1:], None], strict=True)
    }
    parts["select"] = sql[sql.rindex("\n)\n") + 3 :]
    return parts


def test_the_two_finish_statements_share_their_input_fence_and_journal_entry() -> None:
    queries = Queries(Prefix.parse("venturi"))
    plain, steps = ctes(queries.finish_jobs.sql), ctes(queries.finish_jobs_in_workflows.sql)

    assert steps["input"] == plain["input"]
    assert steps["journaled"] == plain["journaled"]
    assert steps["finished"] == plain["finished"].replace(
        "(j.status = 'claimed' AND j.workflow_id IS NULL OR j.id <> i.id)",
        "(j.status = 'claimed' OR j.id <> i.id)",
    ).replace(
        "AS wakes_waiter\n", "AS wakes_waiter,\n              j.workflow_id, j.status AS ended\n"
    )
    assert steps["finished"] != plain["finished"]
    assert steps["select"].startswith(plain["select"].removesuffix("\nFROM finished AS f"))
