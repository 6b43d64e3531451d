"""The claim probes _jobs_claim even when the statistics see a single kind.

With ``kind = k.kind`` the planner dropped kind from the sort keys and, seeing
one kind in the statistics, read _jobs_claim_priority with kind as a heap
filter: a worker whose kind had no jobs walked the whole backlog on every claim.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from support import index_names

from venturi.naming import Prefix
from venturi.postgres.backend import claim_input
from venturi.postgres.queries import Queries


@pytest.mark.parametrize("kinds", [["other.kind"], ["only.kind"], ["only.kind", "other.kind"]])
def test_claim_reads_the_per_kind_claim_index_when_one_kind_fills_the_table(
    db: Any, prefix: str, kinds: list[str]
) -> None:
    db.execute(
        "TRUNCATE {{prefix}}_journal, {{prefix}}_jobs, {{prefix}}_checkpoints, {{prefix}}_events"
    )
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
        " SELECT lpad(n::text, 26, '0'), 'only.kind', '{}', 'pending',"
        " now() - make_interval(secs => n), now() - make_interval(secs => n)"
        " FROM generate_series(1, 20000) AS n"
    )
    db.execute("ANALYZE {{prefix}}_jobs")
    sql = Queries(Prefix.parse(prefix)).claim_jobs.sql
    params = {
        "kinds": claim_input(kinds, [8] * len(kinds)),
        "limit": 8,
        "worker_id": "h:1",
        "lease": timedelta(minutes=1),
        "horizon": timedelta(0),
    }

    (row,) = db.all("EXPLAIN (FORMAT JSON) " + sql, params)
    plan = row["QUERY PLAN"][0]["Plan"]

    used = index_names(plan)
    assert f"{prefix}_jobs_claim" in used, used
    assert f"{prefix}_jobs_claim_priority" not in used, used
