"""Fenced changes find their rows by primary key even when statistics see no claims.

``finish_jobs``, ``renew_leases`` and ``release_jobs`` join their input to the
jobs table on ``id`` and fence on ``status = 'claimed'``. When the statistics
were taken while nothing was claimed (an idle queue, ANALYZEd, then a burst),
the planner estimated one claimed row and drove the join from ``_jobs_history``
(``status = 'claimed'``): every index entry of a claimed row version, the dead
ones included until VACUUM. In a benchmark on a 1.2M-row table that made
a 500-outcome finish take 2-3.6 s instead of about 20 ms.

The statements are ``:replan`` (never prepared, so always planned with their
actual parameters): their generic plan tests every row against the whole id
array. 100,000 rows, so that reading the whole table would be the wrong plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from support import Database, index_names, migrated_prefix

from venturi.naming import Prefix
from venturi.postgres.backend import finish_input
from venturi.postgres.queries import Queries
from venturi.types import Claim, Finished, Outcome, OutcomeKind

CLAIMS = 500
ROWS = 100_000


def completed(ids: list[str]) -> list[Finished]:
    """A completed outcome (result ``null``) on the claim ``h:1``, run 1, of each id."""
    return [
        Finished(Claim(i, "h:1", 1), Outcome(OutcomeKind.COMPLETED, result="null")) for i in ids
    ]


def scanned_relations(plan: Any) -> list[str]:
    found = [plan["Relation Name"]] if plan.get("Node Type") == "Seq Scan" else []
    for child in plan.get("Plans", []):
        found += scanned_relations(child)
    return found


@pytest.fixture
def claims(db: Any) -> dict[str, list[Any]]:
    """100,000 pending rows ANALYZEd with none claimed, then 500 claimed behind the statistics."""
    db.execute(
        "TRUNCATE {{prefix}}_journal, {{prefix}}_jobs, {{prefix}}_checkpoints, {{prefix}}_events"
    )
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
        " SELECT lpad(n::text, 26, '0'), 'only.kind', '{}', 'pending',"
        " now() - make_interval(secs => n), now() - make_interval(secs => n)"
        " FROM generate_series(1, %s) AS n",
        (ROWS,),
    )
    db.execute("ANALYZE {{prefix}}_jobs")
    rows = db.all(
        "UPDATE {{prefix}}_jobs SET status = 'claimed', claimed_by = 'h:1', run_count = 1,"
        " claim_expires_at = now() + interval '1 minute'"
        " WHERE id IN (SELECT id FROM {{prefix}}_jobs ORDER BY id LIMIT %s) RETURNING id",
        (CLAIMS,),
    )
    return {
        "ids": [row["id"] for row in rows],
        "claimed_by": ["h:1"] * CLAIMS,
        "run_counts": [1] * CLAIMS,
    }


@pytest.mark.parametrize("name", ["finish_jobs", "renew_leases", "release_jobs"])
def test_fenced_changes_probe_the_primary_key_not_the_claimed_entries(
    db: Any, prefix: str, claims: dict[str, list[Any]], name: str
) -> None:
    params: dict[str, Any] = {**claims, "lease": timedelta(minutes=1), "note": "shutdown"}
    if name == "finish_jobs":
        params.update(finish_input(completed(claims["ids"])), result_channel="venturi_result_")
    query = getattr(Queries(Prefix.parse(prefix)), name)
    assert query.replan, f"{name} must be :replan: its generic plan scans the table"

    (row,) = db.all("EXPLAIN (FORMAT JSON) " + query.sql, params)
    plan = row["QUERY PLAN"][0]["Plan"]

    used = index_names(plan)
    assert f"{prefix}_jobs_pkey" in used, used
    assert f"{prefix}_jobs_history" not in used, used
    assert f"{prefix}_jobs_lease" not in used, used
    assert f"{prefix}_jobs" not in scanned_relations(plan)


BATCH = 200


@pytest.fixture
def own_prefix(database_url: str) -> Iterator[str]:
    """A prefix of this test's own: its tables have never been analyzed."""
    with migrated_prefix(database_url) as value:
        yield value


def removed_by_join_filters(plan: Any) -> int:
    removed = int(plan.get("Rows Removed by Join Filter", 0))
    return removed + sum(removed_by_join_filters(child) for child in plan.get("Plans", []))


@pytest.mark.parametrize("analyzed", [False, True], ids=["never-analyzed", "analyzed"])
@pytest.mark.parametrize(
    "name", ["finish_jobs", "finish_jobs_in_workflows", "renew_leases", "release_jobs"]
)
def test_fenced_changes_match_each_claim_to_its_input_once(
    database_url: str, own_prefix: str, name: str, analyzed: bool
) -> None:
    """Each row found is matched to its input row by id (a hash or merge join), not by
    rescanning the whole input for every row: the fence's own tests on _jobs, as
    restrictions, made the planner expect one row and loop (ADR 0132), quadratic in the
    batch (200 outcomes: 39,800 rows removed by the join filter, 13.6 ms against 3.5)."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        plan = _explained_fenced_change(Database(conn, own_prefix), own_prefix, name, analyzed)
    assert removed_by_join_filters(plan) == 0


def _explained_fenced_change(db: Database, prefix: str, name: str, analyzed: bool) -> Any:
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
        " SELECT lpad(n::text, 26, '0'), 'only.kind', '{}', 'pending',"
        " now() - make_interval(secs => n), now() - make_interval(secs => n)"
        " FROM generate_series(1, 20000) AS n"
    )
    if analyzed:
        db.execute("ANALYZE {{prefix}}_jobs")
    ids = [
        row["id"]
        for row in db.all(
            "UPDATE {{prefix}}_jobs SET status = 'claimed', claimed_by = 'h:1', run_count = 1,"
            " claim_expires_at = now() + interval '1 minute'"
            " WHERE id IN (SELECT id FROM {{prefix}}_jobs ORDER BY id LIMIT %s) RETURNING id",
            (BATCH,),
        )
    ]
    params: dict[str, Any] = {
        "ids": ids,
        "claimed_by": ["h:1"] * BATCH,
        "run_counts": [1] * BATCH,
        "lease": timedelta(minutes=1),
        "note": "shutdown",
        **finish_input(completed(ids)),
        "result_channel": "venturi_result_",
        "channel": "venturi_wakeup",
    }
    query = getattr(Queries(Prefix.parse(prefix)), name)
    db.execute("BEGIN")
    try:
        (row,) = db.all("EXPLAIN (ANALYZE, FORMAT JSON) " + query.sql, params)
    finally:
        db.execute("ROLLBACK")
    return row["QUERY PLAN"][0]["Plan"]
