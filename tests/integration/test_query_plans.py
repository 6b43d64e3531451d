"""Query-plan regression tests: every hot and operations statement reads its index.

Each test runs ``EXPLAIN (FORMAT JSON)`` on the adapter's own statement (taken
from the query-file loader, so the real SQL is checked) with realistic bound
parameters, on a table built once per module to look like a queue that has
been running for two weeks: ~100k jobs, most of them terminal (finished over
fourteen days) or pending with a future ``visible_at`` (backoff and scheduled
rows that keep their old ``created_at``), a backlog of eligible pending jobs,
a few hundred claims with live leases, a few dozen expired ones, dedup keys,
an hourly beat schedule, and a journal of one to three entries per run job.
It is analyzed with a sample as large as the table, so the statistics, and
therefore the plans, are the same on every run.

EXPLAIN without ANALYZE plans a statement without running it, so nothing here
changes a row; bound parameters give a custom plan, the one the adapter's
first executions get. ``docs/design/indexes.md`` maps each access path to its
index and shows the plans these tests pin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from support import migrated_prefix

from venturi.naming import Prefix
from venturi.postgres.backend import claim_input, finish_input
from venturi.postgres.queries import Queries
from venturi.postgres.sessions import configure_claim_session
from venturi.types import Claim, ClaimFloor, Finished, Outcome, OutcomeKind

JOBS = 100_000
#: ANALYZE samples 300 x target rows: 500 covers every job and journal row.
STATISTICS_TARGET = 500
LEASE = timedelta(minutes=5)

#: Twenty kinds with a skewed mix (the first is ~22% of the rows, the last ~2.5%).
KINDS = (
    "mail.send", "billing.charge", "thumbnails.render", "search.index", "webhooks.deliver",
    "exports.csv", "sms.send", "push.notify", "crm.sync", "invoices.render",
    "audit.archive", "geo.lookup", "feeds.refresh", "users.welcome", "cache.warm",
    "reports.weekly", "payments.reconcile", "images.moderate", "ledger.close", "backups.verify",
)  # fmt: skip
#: The beat-scheduled kind: 337 hourly ticks, only the next one pending (and not yet due).
SCHEDULED_KIND = "reports.nightly"
EVERY_KIND = (*KINDS, SCHEDULED_KIND)

#: Server-side generation (one statement, seeded): the job rows in id order, as
#: a real table fills. Ids are ULID-shaped and sort by creation time.
BUILD_JOBS = """
WITH draws AS MATERIALIZED (
    SELECT i, random() AS r_status, random() AS r_kind, random() AS r_time, random() AS r_misc,
           now() - interval '14 days' * (1 - i::float8 / %(rows)s) AS aged
    FROM generate_series(1, %(rows)s) AS i
), shaped AS (
    SELECT d.*,
           (%(kinds)s::text[])[1 + floor(20 * d.r_kind * d.r_kind)::int] AS kind,
           CASE WHEN d.r_status < 0.62 THEN 'completed'
                WHEN d.r_status < 0.70 THEN 'dead'
                WHEN d.r_status < 0.92 THEN 'scheduled'
                WHEN d.r_status < 0.997 THEN 'eligible'
                WHEN d.r_status < 0.9995 THEN 'running'
                ELSE 'abandoned' END AS shape
    FROM draws AS d
), timed AS (
    SELECT s.*,
           CASE WHEN s.shape IN ('completed', 'dead', 'scheduled') THEN s.aged
                ELSE now() - interval '30 minutes' * s.r_time END AS created
    FROM shaped AS s
)
INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at,
                             claim_expires_at, claimed_by, finished_at, run_count,
                             failure_count, dedup_key)
SELECT lpad(floor(extract(epoch FROM t.created) * 1000)::bigint::text, 13, '0')
           || lpad(t.i::text, 13, '0'),
       t.kind,
       jsonb_build_object('n', t.i, 'to', 'user' || t.i || '@example.org'),
       CASE WHEN t.r_misc < 0.1 THEN 0 WHEN t.r_misc < 0.8 THEN 1 ELSE 2 END,
       CASE t.shape WHEN 'completed' THEN 'completed' WHEN 'dead' THEN 'dead'
                    WHEN 'running' THEN 'claimed' WHEN 'abandoned' THEN 'claimed'
                    ELSE 'pending' END,
       t.created,
       CASE t.shape WHEN 'scheduled' THEN now() + interval '3 days' * t.r_time
                    ELSE t.created END,
       CASE t.shape WHEN 'running'
                    THEN now() + interval '2 minutes' + interval '5 minutes' * t.r_time
                    WHEN 'abandoned' THEN now() - interval '10 minutes' * t.r_time END,
       CASE WHEN t.shape IN ('running', 'abandoned')
            THEN 'worker-' || (t.i %% 8) || ':' || (1000 + t.i %% 8) END,
       CASE WHEN t.shape IN ('completed', 'dead')
            THEN t.created + interval '2 minutes' * t.r_time END,
       CASE WHEN t.shape = 'eligible' THEN 0 ELSE 1 + floor(t.r_misc * t.r_misc * 2.5)::int END,
       CASE WHEN t.shape IN ('dead', 'scheduled') THEN floor(t.r_misc * 5)::int ELSE 0 END,
       CASE WHEN t.r_misc < 0.25 THEN 'order:' || (t.i %% 50000) END
FROM timed AS t
ORDER BY 1
"""

#: One beat schedule (dedup key ``beat:<name>``): an hourly tick for two weeks.
BUILD_SCHEDULE = """
INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at,
                             finished_at, run_count, dedup_key)
SELECT lpad(floor(extract(epoch FROM x.tick) * 1000)::bigint::text, 13, '0')
           || lpad((10000000 + h)::text, 13, '0'),
       %(kind)s, '{}'::jsonb, 1,
       CASE WHEN h < 336 THEN 'completed' ELSE 'pending' END,
       x.tick - interval '10 minutes', x.tick,
       CASE WHEN h < 336 THEN x.tick + interval '30 seconds' END,
       CASE WHEN h < 336 THEN 1 ELSE 0 END,
       'beat:nightly'
FROM generate_series(0, 336) AS h,
     LATERAL (SELECT date_trunc('hour', now()) - interval '335 hours' + interval '1 hour' * h
              AS tick) AS x
"""

#: One journal entry per run: ``retried`` for the failed ones, the ending last.
BUILD_JOURNAL = """
INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
SELECT j.id, j.kind, n, j.created_at + interval '1 minute' * n,
       CASE WHEN n = j.run_count AND j.status IN ('completed', 'dead') THEN j.status
            ELSE 'retried' END,
       CASE WHEN n = j.run_count AND j.status = 'completed' THEN NULL
            ELSE 'TimeoutError: upstream took too long' END
FROM {{prefix}}_jobs AS j, generate_series(1, j.run_count) AS n
WHERE j.status IN ('completed', 'dead') OR (j.status = 'pending' AND j.run_count > 0)
"""

#: What PostgreSQL's ON DELETE CASCADE trigger runs for each deleted job
#: (ri_triggers.c builds ``DELETE FROM ONLY <fk table> WHERE $1 = <fk column>``).
CASCADE_DELETE = "DELETE FROM ONLY {{prefix}}_journal WHERE %(id)s = job_id"

#: Statements that read no table: nothing to plan.
NO_TABLE_READ = {
    "advisory_unlock",
    "copy_jobs",
    "copy_jobs_with_headers",
    "enqueue_job",
    "enqueue_job_now",
    "enqueue_job_with_headers",
    "database_now",
    "lock_dedup_key",
    "notify_wakeup",
    "ping",
    "try_advisory_lock",
    "try_advisory_xact_lock",
}


@dataclass(frozen=True)
class Node:
    """One plan node and the node types of its ancestors (nearest first)."""

    fields: dict[str, Any]
    ancestors: tuple[str, ...]

    @property
    def type(self) -> str:
        return str(self.fields["Node Type"])

    def get(self, key: str) -> str:
        return str(self.fields.get(key, ""))


@dataclass(frozen=True)
class Plan:
    """An ``EXPLAIN (FORMAT JSON)`` tree, flattened so asserts read as sentences."""

    nodes: tuple[Node, ...]
    text: str

    @classmethod
    def parse(cls, document: Any) -> Plan:
        root = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
        nodes: list[Node] = []
        lines: list[str] = []

        def walk(fields: dict[str, Any], ancestors: tuple[str, ...]) -> None:
            nodes.append(Node(fields, ancestors))
            lines.append("  " * len(ancestors) + _describe(fields))
            for child in fields.get("Plans", ()):
                walk(child, (fields["Node Type"], *ancestors))

        walk(root, ())
        return cls(tuple(nodes), "\n".join(lines))

    def index_scans(self, index: str) -> list[Node]:
        return [n for n in self.nodes if n.get("Index Name") == index]

    def table_reads(self, table: str) -> list[Node]:
        """Every scan node that reads ``table``'s heap or one of its indexes."""
        return [
            n
            for n in self.nodes
            if "Scan" in n.type
            and (n.get("Relation Name") == table or n.get("Index Name").startswith(f"{table}_"))
        ]

    def seq_scans(self, table: str) -> list[Node]:
        return [
            n for n in self.nodes if n.type.endswith("Seq Scan") and n.get("Relation Name") == table
        ]

    def sorts(self) -> list[Node]:
        return [n for n in self.nodes if n.type in ("Sort", "Incremental Sort")]

    def sorts_below(self, node_type: str) -> list[Node]:
        """Sorts feeding ``node_type``: for LockRows, rows not locked in index order."""
        return [n for n in self.sorts() if node_type in n.ancestors]


def _describe(fields: dict[str, Any]) -> str:
    parts = [str(fields.get("Operation", fields["Node Type"]))]
    if "Scan Direction" in fields and fields["Scan Direction"] != "Forward":
        parts.append(str(fields["Scan Direction"]))
    for key in ("Index Name", "Relation Name", "CTE Name"):
        if key in fields:
            parts.append(f"[{fields[key]}]")
    for key in ("Index Cond", "Recheck Cond", "Filter", "Sort Key"):
        if key in fields:
            value = fields[key]
            parts.append(f"{key}: {', '.join(value) if isinstance(value, list) else value}")
    return " ".join(parts)


@dataclass
class Planner:
    """The module's realistic table, the adapter's statements, and sample parameters."""

    conn: psycopg.Connection[dict[str, Any]]
    prefix: Prefix
    queries: Queries
    samples: dict[str, Any]

    def index(self, suffix: str) -> str:
        return f"{self.prefix.value}{suffix}"

    @property
    def jobs(self) -> str:
        return f"{self.prefix.value}_jobs"

    @property
    def journal(self) -> str:
        return f"{self.prefix.value}_journal"

    def explain(self, name: str, **params: Any) -> Plan:
        """The plan of the named statement of queries.sql with these parameters."""
        return self.explain_sql(getattr(self.queries, name).sql, **params)

    def explain_sql(self, sql: str, **params: Any) -> Plan:
        row = self.conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
        assert row is not None
        return Plan.parse(row["QUERY PLAN"])

    def one(self, sql: str, **params: Any) -> dict[str, Any]:
        row = self.conn.execute(self.prefix.substitute(sql), params).fetchone()
        assert row is not None, sql
        return row


@pytest.fixture(scope="module")
def planner(database_url: str, prefix: str) -> Iterator[Planner]:
    """Builds the realistic table once for the module (a few seconds), then ANALYZEs it."""
    valid = Prefix.parse(prefix)
    with psycopg.connect(
        database_url, autocommit=True, row_factory=dict_row, prepare_threshold=None
    ) as conn:
        conn.execute("SELECT setseed(0.42)")
        conn.execute(valid.substitute(BUILD_JOBS), {"rows": JOBS, "kinds": list(KINDS)})
        conn.execute(valid.substitute(BUILD_SCHEDULE), {"kind": SCHEDULED_KIND})
        conn.execute(valid.substitute(BUILD_JOURNAL))
        # A sample as large as the table: the statistics, hence the plans, are the
        # same on every run (the default samples 30,000 rows at random).
        conn.execute(f"SET default_statistics_target = {STATISTICS_TARGET}")
        conn.execute(f"VACUUM ANALYZE {valid.value}_jobs")
        conn.execute(f"VACUUM ANALYZE {valid.value}_journal")
        planner = Planner(conn, valid, Queries(valid), {})
        planner.samples = _samples(planner)
        yield planner


def _samples(planner: Planner) -> dict[str, Any]:
    """Parameters taken from the table, as the adapter would send them."""
    claims = planner.conn.execute(
        planner.prefix.substitute(
            "SELECT id, claimed_by, run_count FROM {{prefix}}_jobs"
            " WHERE status = 'claimed' AND claim_expires_at > now() ORDER BY id LIMIT 8"
        )
    ).fetchall()
    cursor = planner.one(
        "SELECT created_at, id FROM {{prefix}}_jobs ORDER BY created_at DESC, id DESC"
        " LIMIT 1 OFFSET 49"
    )
    return {
        "sibling": planner.one(
            "SELECT kind, dedup_key FROM {{prefix}}_jobs"
            " WHERE status = 'pending' AND dedup_key IS NOT NULL ORDER BY id LIMIT 1 OFFSET 100"
        ),
        "completed_id": planner.one(
            "SELECT id FROM {{prefix}}_jobs WHERE status = 'completed' AND run_count = 2"
            " ORDER BY id LIMIT 1 OFFSET 1000"
        )["id"],
        "dead_id": planner.one(
            "SELECT id FROM {{prefix}}_jobs WHERE status = 'dead' ORDER BY id LIMIT 1 OFFSET 500"
        )["id"],
        "pending_id": planner.one(
            "SELECT id FROM {{prefix}}_jobs WHERE status = 'pending' ORDER BY id LIMIT 1 OFFSET 500"
        )["id"],
        "claimed_id": claims[0]["id"],
        "claims": {
            "ids": [c["id"] for c in claims],
            "claimed_by": [c["claimed_by"] for c in claims],
            "run_counts": [c["run_count"] for c in claims],
        },
        "cursor": (cursor["created_at"], cursor["id"]),
    }


def _claim_params(
    kinds: tuple[str, ...] | list[str], limit: int, floor: tuple[int, datetime] | None = None
) -> dict[str, Any]:
    """Claim parameters; ``floor`` (priority, created_at) applies to every kind (ADR 0115)."""
    floors = {} if floor is None else {kind: ClaimFloor(*floor) for kind in kinds}
    return {
        "kinds": claim_input(list(kinds), [limit] * len(kinds), floors),
        "limit": limit,
        "worker_id": "host-1:4242",
        "lease": LEASE,
        "horizon": timedelta(0),
    }


def _finished(claims: dict[str, list[Any]], outcomes: list[Outcome]) -> list[Finished]:
    """``outcomes`` on the claims of ``claims`` (ids, claimed_by, run_counts), in order."""
    fences = zip(claims["ids"], claims["claimed_by"], claims["run_counts"], strict=True)
    return [
        Finished(Claim(*fence), outcome) for fence, outcome in zip(fences, outcomes, strict=True)
    ]


def _list_params(
    status: str | None = None, kind: str | None = None, after: tuple[datetime, str] | None = None
) -> dict[str, Any]:
    return {
        "status": status,
        "kind": kind,
        "after_created_at": after[0] if after else None,
        "after_id": after[1] if after else None,
        "limit": 50,
    }


# -- the table is what the tests claim it is -------------------------------------------------


def test_the_table_looks_like_a_queue_that_has_run_for_two_weeks(planner: Planner) -> None:
    shape = planner.one(
        """
        SELECT count(*) AS jobs,
               count(*) FILTER (WHERE status IN ('completed', 'dead')) AS terminal,
               count(*) FILTER (WHERE status = 'pending' AND visible_at > now()) AS future,
               count(*) FILTER (WHERE status = 'pending' AND visible_at <= now()) AS eligible,
               count(*) FILTER (WHERE status = 'claimed' AND claim_expires_at > now()) AS live,
               count(*) FILTER (WHERE status = 'claimed' AND claim_expires_at <= now()) AS expired,
               count(*) FILTER (WHERE status = 'pending' AND dedup_key IS NOT NULL) AS dedup,
               max(now() - finished_at) AS oldest_finish
        FROM {{prefix}}_jobs
        """
    )
    journal = planner.one("SELECT count(*) AS entries FROM {{prefix}}_journal")
    assert shape["jobs"] >= JOBS
    assert shape["terminal"] + shape["future"] > 0.8 * shape["jobs"]
    assert shape["eligible"] > 5_000
    assert shape["live"] > 100
    assert shape["expired"] > 10
    assert shape["dedup"] > 1_000
    assert shape["oldest_finish"] > timedelta(days=13)
    assert journal["entries"] > shape["jobs"]


def test_every_statement_of_the_query_file_is_covered_here(planner: Planner) -> None:
    """A new statement in queries.sql must get a plan test (or be listed as reading no table)."""
    source = Path(__file__).read_text(encoding="utf-8")
    checked = {name for name in planner.queries.names() if f'"{name}"' in source}
    assert planner.queries.names() - checked - NO_TABLE_READ == set()


# -- claim (ADR 3, 20, 22, 23) ---------------------------------------------------------------


def _claim_scans(planner: Planner, plan: Plan) -> list[Node]:
    return plan.index_scans(planner.index("_jobs_claim")) + plan.index_scans(
        planner.index("_jobs_claim_priority")
    )


def _assert_per_kind_claim_probes(planner: Planner, plan: Plan, *conditions: str) -> None:
    """Ordered _jobs_claim probes; kind, visible_at and ``conditions`` in their index conditions."""
    claim_scans = plan.index_scans(planner.index("_jobs_claim"))
    assert claim_scans, plan.text
    for text in ("kind", "visible_at", *conditions):
        assert all(text in n.get("Index Cond") for n in claim_scans), (text, plan.text)
    assert plan.index_scans(planner.index("_jobs_claim_priority")) == [], plan.text
    assert plan.sorts_below("LockRows") == [], plan.text


#: A claim for every kind, and for one kind of many.
SERVED = [pytest.param(EVERY_KIND, id="every-kind"), pytest.param(("crm.sync",), id="one-kind")]


@pytest.mark.parametrize("limit", [1, 8])
def test_claim_for_every_kind_locks_rows_in_claim_index_order(planner: Planner, limit: int) -> None:
    plan = planner.explain("claim_jobs", **_claim_params(EVERY_KIND, limit))
    claim_scans = _claim_scans(planner, plan)
    assert claim_scans, plan.text
    # visible_at is checked inside the index (V3): future rows cost no heap fetch.
    assert all("visible_at" in n.get("Index Cond") for n in claim_scans), plan.text
    assert plan.sorts_below("LockRows") == [], plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize("limit", [1, 8])
@pytest.mark.parametrize(
    "served",
    [
        pytest.param(("crm.sync",), id="one-kind-of-many"),
        pytest.param((SCHEDULED_KIND,), id="a-kind-with-nothing-eligible"),
        pytest.param(tuple(k for k in EVERY_KIND if k != "mail.send"), id="all-but-a-capped-kind"),
    ],
)
def test_claim_for_some_kinds_reads_only_those_kinds_from_the_per_kind_claim_index(
    planner: Planner, served: tuple[str, ...], limit: int
) -> None:
    """The scan is confined to the served kinds: other kinds' backlogs are never walked."""
    plan = planner.explain("claim_jobs", **_claim_params(served, limit))
    _assert_per_kind_claim_probes(planner, plan)


@pytest.mark.parametrize("served", SERVED)
def test_claim_with_floors_starts_each_probe_at_its_floor(
    planner: Planner, served: tuple[str, ...]
) -> None:
    """A floor (ADR 0115) is where the index scan starts, not a filter on what it reads."""
    floor = (1, datetime.now(UTC) - timedelta(minutes=10))
    plan = planner.explain("claim_jobs", **_claim_params(served, 8, floor=floor))
    _assert_per_kind_claim_probes(planner, plan, "ROW(kind, priority, created_at) >=")


#: The SQL type of each claim_jobs parameter, for PREPARE.
_CLAIM_PARAM_TYPES = {
    "kinds": "json",
    "horizon": "interval",
    "limit": "bigint",
    "worker_id": "text",
    "lease": "interval",
}


@contextmanager
def _on_a_claim_session(
    conn: psycopg.Connection[Any], sql: str, param_types: dict[str, str]
) -> Iterator[Callable[[str, dict[str, Any]], list[Any]]]:
    """``sql`` prepared on ``conn`` set up as the claim pool's sessions are; yields
    ``run(head, params)``, which sends ``{head} EXECUTE`` of it (the cached plan)."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    assert sorted(names) == sorted(param_types)
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)
    types = ", ".join(param_types[name] for name in names)
    placeholders = ", ".join(["%s"] * len(names))
    configure_claim_session(conn)
    conn.execute(f"PREPARE claim_statement ({types}) AS {numbered}")

    def run(head: str, params: dict[str, Any]) -> list[Any]:
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(
            f"{head} EXECUTE claim_statement ({placeholders})", [params[n] for n in names]
        )
        return cursor.fetchall() if cursor.description else []

    try:
        yield run
    finally:
        conn.execute("DEALLOCATE claim_statement")
        conn.execute("RESET plan_cache_mode")
        conn.execute("RESET enable_seqscan")


def _plan_of(run: Callable[[str, dict[str, Any]], list[Any]], params: dict[str, Any]) -> Plan:
    rows = run("EXPLAIN (FORMAT JSON)", params)
    return Plan.parse(rows[0]["QUERY PLAN"])


@pytest.mark.parametrize("served", SERVED)
def test_the_claim_pools_generic_plan_probes_the_per_kind_claim_index(
    planner: Planner, served: tuple[str, ...]
) -> None:
    """The claim pool forces generic plans (backend.py): that plan must be as good."""
    with _on_a_claim_session(
        planner.conn, planner.queries.claim_jobs.sql, _CLAIM_PARAM_TYPES
    ) as run:
        plan = _plan_of(run, _claim_params(served, 8))
    _assert_per_kind_claim_probes(planner, plan)
    assert plan.seq_scans(planner.jobs) == [], plan.text


def test_a_claim_sessions_plan_made_on_an_empty_table_still_probes_once_the_table_has_grown(
    database_url: str,
) -> None:
    """A claim session plans ``claim_jobs`` once (``configure_claim_session``), often when
    the table is empty (a worker started on a quiet queue), and keeps that plan until the
    table is next vacuumed or analyzed. Made on an empty table, the generic plan joined
    the picked rows to ``_jobs`` by a hash join over a sequential scan: every claim read
    the whole table (under a 2,000 jobs/s offer, 15-60 ms a claim before the first
    autovacuum, the worst lag 189 ms)."""
    params = _claim_params(["mail.send"], 16)
    with (
        migrated_prefix(database_url) as value,
        psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn,
        _on_a_claim_session(
            conn, Queries(Prefix.parse(value)).claim_jobs.sql, _CLAIM_PARAM_TYPES
        ) as run,
    ):
        run("", params)  # planned here, on the empty table
        conn.execute(
            Prefix.parse(value).substitute(
                "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
                " SELECT 'j' || n, 'mail.send', '{}', 'pending', now(), now()"
                " FROM generate_series(1, 20000) AS n"
            )
        )
        plan = _plan_of(run, params)
    assert plan.seq_scans(f"{value}_jobs") == [], plan.text


# -- enqueue and dedup (ADR 10) ----------------------------------------------------------------


def test_dedup_lookup_finds_the_oldest_pending_sibling_in_the_dedup_index(
    planner: Planner,
) -> None:
    sibling = planner.samples["sibling"]
    plan = planner.explain("find_dedup_sibling", **sibling)
    scans = plan.index_scans(planner.index("_jobs_dedup"))
    assert scans, plan.text
    assert "dedup_key" in scans[0].get("Index Cond"), plan.text
    assert plan.sorts() == [], plan.text


def test_merging_into_a_sibling_updates_it_by_primary_key(planner: Planner) -> None:
    plan = planner.explain(
        "merge_into_sibling",
        id=planner.samples["pending_id"],
        payload=None,
        priority=0,
        expires_in=timedelta(minutes=10),
        expires_at=None,
        debounce=timedelta(seconds=5),
        note="keep: absorbed 01J0000000000000000000000",
    )
    assert plan.index_scans(planner.index("_jobs_pkey")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


def test_enqueue_inserts_without_reading_existing_rows(planner: Planner) -> None:
    plan = planner.explain(
        "enqueue_jobs",
        ids=["01J00000000000000000000001", "01J00000000000000000000002"],
        kinds=["mail.send", "sms.send"],
        payloads=['{"to": "a@example.org"}', '{"to": "+33100000000"}'],
        priorities=[1, 0],
        delays=[timedelta(0), timedelta(seconds=30)],
        etas=[None, None],
        dedup_keys=[None, None],
        fair_keys=[None, "tenant-7"],
        expires_ins=[None, timedelta(minutes=10)],
        expires_ats=[None, None],
        channel=f"{planner.prefix.value}_wakeup",
    )
    assert plan.table_reads(planner.jobs) == [], plan.text


def test_enqueue_with_trace_headers_inserts_without_reading_existing_rows(
    planner: Planner,
) -> None:
    """The instrumented form (ADR 0127) plans like enqueue_jobs."""
    plan = planner.explain(
        "enqueue_jobs_with_headers",
        ids=["01J00000000000000000000001", "01J00000000000000000000002"],
        kinds=["mail.send", "sms.send"],
        payloads=['{"to": "a@example.org"}', '{"to": "+33100000000"}'],
        priorities=[1, 0],
        delays=[timedelta(0), timedelta(seconds=30)],
        etas=[None, None],
        dedup_keys=[None, None],
        fair_keys=[None, "tenant-7"],
        expires_ins=[None, timedelta(minutes=10)],
        expires_ats=[None, None],
        headers=[
            '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
            None,
        ],
        channel=f"{planner.prefix.value}_wakeup",
    )
    assert plan.table_reads(planner.jobs) == [], plan.text


# -- leases and outcomes (ADR 11, 19, 21) ------------------------------------------------------


def test_stale_recovery_reads_expired_leases_from_the_lease_index_in_expiry_order(
    planner: Planner,
) -> None:
    plan = planner.explain(
        "recover_stale",
        kinds=list(EVERY_KIND),
        max_failures=[20] * len(EVERY_KIND),
        default_max_failures=20,
        limit=500,
    )
    assert plan.index_scans(planner.index("_jobs_lease")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text
    assert plan.sorts() == [], plan.text


@pytest.mark.parametrize("name", ["renew_leases", "release_jobs"])
def test_fenced_claim_changes_find_their_rows_by_primary_key(planner: Planner, name: str) -> None:
    params: dict[str, Any] = {**planner.samples["claims"]}
    params.update({"lease": LEASE} if name == "renew_leases" else {"note": "worker shutdown"})
    plan = planner.explain(name, **params)
    assert plan.index_scans(planner.index("_jobs_pkey")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


def test_batched_finish_finds_its_rows_by_primary_key(planner: Planner) -> None:
    claims = planner.samples["claims"]
    count = len(claims["ids"])
    outcomes = [
        Outcome(OutcomeKind.COMPLETED, result='{"rows": 12}'),
        Outcome(
            OutcomeKind.RETRIED,
            note="TimeoutError: upstream took too long",
            is_failure=True,
            delay=timedelta(seconds=30),
            traceback="Traceback (most recent call last):\n  ...\nTimeoutError",
        ),
    ] * (count // 2)
    plan = planner.explain(
        "finish_jobs",
        **finish_input(_finished(claims, outcomes)),
        result_channel="venturi_result_",
    )
    assert plan.index_scans(planner.index("_jobs_pkey")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize("served", SERVED)
def test_wait_timeout_probes_the_visible_index_once_per_kind(
    planner: Planner, served: tuple[str, ...]
) -> None:
    plan = planner.explain("time_until_visible", kinds=list(served))
    probes = plan.index_scans(planner.index("_jobs_visible"))
    assert probes, plan.text
    assert all("kind" in n.get("Index Cond") and "Limit" in n.ancestors for n in probes), plan.text
    assert plan.sorts() == [], plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


# -- operations (ADR 18) -----------------------------------------------------------------------


def test_timeline_reads_the_journal_index_in_id_order(planner: Planner) -> None:
    plan = planner.explain("job_timeline", id=planner.samples["completed_id"])
    assert plan.index_scans(planner.index("_journal_job")), plan.text
    assert plan.sorts() == [], plan.text


def test_cascade_from_a_deleted_job_finds_its_journal_through_the_journal_index(
    planner: Planner,
) -> None:
    plan = planner.explain_sql(
        planner.prefix.substitute(CASCADE_DELETE), id=planner.samples["completed_id"]
    )
    assert plan.index_scans(planner.index("_journal_job")), plan.text
    assert plan.seq_scans(planner.journal) == [], plan.text


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param({}, id="first-page"),
        pytest.param({"after": "cursor"}, id="next-page"),
        pytest.param({"status": "completed"}, id="completed"),
        pytest.param({"status": "pending"}, id="pending"),
        pytest.param({"kind": "crm.sync"}, id="one-kind"),
        pytest.param({"status": "completed", "after": "cursor"}, id="completed-next-page"),
    ],
)
def test_listing_walks_the_created_index_backwards_without_sorting(
    planner: Planner, filters: dict[str, str]
) -> None:
    after = planner.samples["cursor"] if "after" in filters else None
    params = _list_params(filters.get("status"), filters.get("kind"), after)
    plan = planner.explain("list_jobs", **params)
    scans = plan.index_scans(planner.index("_jobs_created"))
    assert [n.get("Scan Direction") for n in scans] == ["Backward"], plan.text
    if after is not None:
        assert "created_at" in scans[0].get("Index Cond"), plan.text
    assert plan.sorts() == [], plan.text


def test_listing_by_status_and_kind_reads_an_index_never_the_table(planner: Planner) -> None:
    """A selective status+kind filter may go through _jobs_history and sort what it finds."""
    plan = planner.explain("list_jobs", **_list_params("dead", "crm.sync"))
    used = {n.get("Index Name") for n in plan.table_reads(planner.jobs)}
    assert used & {planner.index("_jobs_created"), planner.index("_jobs_history")}, plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize(
    "name", ["get_job", "lock_job", "retry_job", "cancel_job", "request_cancel"]
)
def test_single_job_operations_find_the_job_by_primary_key(planner: Planner, name: str) -> None:
    samples = {"cancel_job": "pending_id", "request_cancel": "claimed_id"}
    job_id = planner.samples[samples.get(name, "dead_id")]
    params: dict[str, Any] = {"id": job_id}
    if name == "cancel_job":
        params["note"] = "cancelled"
    plan = planner.explain(name, **params)
    assert plan.index_scans(planner.index("_jobs_pkey")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize("name", ["read_result", "await_result"])
def test_result_waiters_find_the_job_by_primary_key(planner: Planner, name: str) -> None:
    """ADR 0124: a waiter's read (with the last note) and its mark are single-row probes."""
    plan = planner.explain(name, id=planner.samples["claimed_id"])
    assert plan.index_scans(planner.index("_jobs_pkey")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text
    assert plan.seq_scans(planner.journal) == [], plan.text


@pytest.mark.parametrize("older_than", [timedelta(days=1), timedelta(days=7)])
def test_cleanup_of_every_terminal_status_range_scans_the_finished_index(
    planner: Planner, older_than: timedelta
) -> None:
    plan = planner.explain("cleanup_finished", older_than=older_than, batch_size=1000)
    scans = plan.index_scans(planner.index("_jobs_finished"))
    assert scans, plan.text
    assert "finished_at <" in scans[0].get("Index Cond"), plan.text
    assert plan.sorts() == [], plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize("older_than", [timedelta(days=1), timedelta(days=7)])
@pytest.mark.parametrize("status", ["completed", "dead"])
def test_cleanup_of_one_status_range_scans_the_finished_index(
    planner: Planner, status: str, older_than: timedelta
) -> None:
    """_jobs_history cannot range-scan the cutoff (kind sits between status and
    finished_at), so the cutoff is a range on the partial _jobs_finished and the
    status is checked on those terminal rows only (see queries.sql)."""
    plan = planner.explain(
        "cleanup_finished_with_status", status=status, older_than=older_than, batch_size=1000
    )
    scans = plan.index_scans(planner.index("_jobs_finished"))
    assert scans, plan.text
    assert all("finished_at <" in n.get("Index Cond") for n in scans), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text
    assert plan.sorts() == [], plan.text


# -- beat bookkeeping --------------------------------------------------------------------------


def test_beat_reads_pending_scheduled_rows_from_the_dedup_index(planner: Planner) -> None:
    plan = planner.explain("pending_with_dedup_prefix", dedup_prefix="beat:")
    assert plan.index_scans(planner.index("_jobs_dedup")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


def test_beat_finds_the_latest_row_of_a_schedule_without_reading_the_whole_table(
    planner: Planner,
) -> None:
    plan = planner.explain("latest_with_dedup_key", kind=SCHEDULED_KIND, dedup_key="beat:nightly")
    assert plan.seq_scans(planner.jobs) == [], plan.text
    assert plan.table_reads(planner.jobs), plan.text


# -- stats -------------------------------------------------------------------------------------


def test_stats_reads_the_jobs_table_in_one_pass(planner: Planner) -> None:
    plan = planner.explain("stats")
    assert len(plan.table_reads(planner.jobs)) == 1, plan.text


@pytest.mark.parametrize("kind", [None, "crm.sync"], ids=["every-kind", "one-kind"])
def test_the_backlog_counts_due_pending_rows_from_a_pending_index_never_the_table(
    planner: Planner, kind: str | None
) -> None:
    """ADR 0136: an autoscaler polls it every few seconds, at any backlog."""
    plan = planner.explain("backlog", kind=kind)
    pending_indexes = ("_jobs_claim", "_jobs_claim_priority", "_jobs_visible")
    scans = [n for s in pending_indexes for n in plan.index_scans(planner.index(s))]
    assert scans, plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text
    if kind is not None:
        assert all("kind" in (n.get("Index Cond") or "") for n in scans), plan.text


# -- dashboard (ADR 0117) ----------------------------------------------------------------------


def test_throughput_range_scans_the_finished_index(planner: Planner) -> None:
    plan = planner.explain("throughput", window=timedelta(minutes=59))
    scans = plan.index_scans(planner.index("_jobs_finished"))
    assert scans, plan.text
    assert "finished_at >=" in scans[0].get("Index Cond"), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param({}, id="first-page"),
        pytest.param({"status": "dead"}, id="dead"),
        pytest.param({"status": "dead", "note": "error"}, id="dead-with-note"),
        pytest.param({"kind": "crm.sync"}, id="one-kind"),
    ],
)
def test_listing_with_the_last_note_probes_the_journal_index_per_row(
    planner: Planner, filters: dict[str, str]
) -> None:
    params = {
        **_list_params(filters.get("status"), filters.get("kind")),
        "note": filters.get("note"),
    }
    plan = planner.explain("list_jobs_noted", **params)
    assert plan.index_scans(planner.index("_journal_job")), plan.text
    assert plan.seq_scans(planner.journal) == [], plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize("name", ["count_jobs", "retry_matching", "cancel_matching"])
def test_counts_and_bulk_changes_of_one_kind_read_indexes_and_probe_the_journal(
    planner: Planner, name: str
) -> None:
    params: dict[str, Any] = {"kind": "crm.sync", "note": "error"}
    if name == "count_jobs":
        params["status"] = "dead"
    else:
        params["batch_size"] = 1000
    if name == "cancel_matching":
        params["cancel_note"] = "cancelled"
    plan = planner.explain(name, **params)
    assert plan.index_scans(planner.index("_journal_job")), plan.text
    assert plan.seq_scans(planner.journal) == [], plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


# -- start check and listing notes (ADR 0118) --------------------------------------------------


def test_the_start_check_of_the_schema_reads_no_row(planner: Planner) -> None:
    plan = planner.explain("check_schema")
    assert plan.table_reads(planner.jobs) == [], plan.text
    assert plan.table_reads(planner.journal) == [], plan.text


# -- the worker registry (ADR 0119) ------------------------------------------------------------

#: 48 registry entries (5 of them expired), each serving a prefix of the kinds; none serves
#: ``backups.verify`` (the last kind) or the beat-scheduled kind.
BUILD_WORKERS = """
INSERT INTO {{prefix}}_workers
    (id, version, kinds, concurrency, running, started_at, heartbeat_at, expires_at)
SELECT 'worker-' || n || ':' || (1000 + n), '0.1.0', (%(kinds)s::text[])[1:1 + n %% 19], 8,
       n %% 8, now() - interval '1 hour' + interval '1 minute' * n,
       now() - interval '1 second' * (n %% 20),
       CASE WHEN n <= 5 THEN now() - interval '1 minute' ELSE now() + interval '40 seconds' END
FROM generate_series(1, 48) AS n
"""


@pytest.fixture(scope="module")
def registry(planner: Planner) -> Planner:
    """The planner's queue, plus a registry of live and expired workers."""
    planner.conn.execute(planner.prefix.substitute(BUILD_WORKERS), {"kinds": list(KINDS)})
    planner.conn.execute(f"VACUUM ANALYZE {planner.prefix.value}_workers")
    return planner


def _registration_params(running: int | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "id": "worker-7:1007",
        "version": "0.1.0",
        "kinds": list(KINDS[:8]),
        "concurrency": 8,
        "expires_in": timedelta(minutes=1),
    }
    if running is not None:
        params.update(running=running, sweep_limit=100)
    return params


def _reads_only_the_registry(planner: Planner, plan: Plan) -> None:
    workers = f"{planner.prefix.value}_workers"
    assert plan.table_reads(planner.jobs) == [], plan.text
    assert plan.table_reads(planner.journal) == [], plan.text
    scanned = {
        n.get("Relation Name") or n.get("Index Name") for n in plan.nodes if "Scan" in n.type
    }
    assert scanned - {"", workers, f"{workers}_pkey"} == set(), plan.text


def _arbiter_indexes(plan: Plan) -> list[str]:
    inserts = [n for n in plan.nodes if n.type == "ModifyTable" and n.get("Operation") == "Insert"]
    assert len(inserts) == 1, plan.text
    return list(inserts[0].fields.get("Conflict Arbiter Indexes", []))


@pytest.mark.parametrize("name", ["register_worker", "heartbeat_worker"])
def test_registration_and_heartbeat_upsert_on_the_registry_primary_key_only(
    registry: Planner, name: str
) -> None:
    """A heartbeat runs every min(lease)/3 in every worker: it touches the registry alone."""
    running = 3 if name == "heartbeat_worker" else None
    plan = registry.explain(name, **_registration_params(running))

    assert _arbiter_indexes(plan) == [registry.index("_workers_pkey")], plan.text
    _reads_only_the_registry(registry, plan)


def test_the_heartbeat_sweep_locks_only_expired_entries_other_than_its_own(
    registry: Planner,
) -> None:
    plan = registry.explain("heartbeat_worker", **_registration_params(3))

    locking = [n for n in plan.nodes if n.type == "LockRows"]
    assert len(locking) == 1, plan.text
    filters = " ".join(n.get("Filter") + n.get("Index Cond") for n in plan.nodes)
    assert "expires_at < now()" in filters and "id <> " in filters, plan.text


@pytest.mark.parametrize("name", ["deregister_worker", "list_workers"])
def test_deregistering_and_listing_read_only_the_registry(registry: Planner, name: str) -> None:
    params = {"id": "worker-7:1007"} if name == "deregister_worker" else {}
    plan = registry.explain(name, **params)

    _reads_only_the_registry(registry, plan)
    assert len(plan.table_reads(f"{registry.prefix.value}_workers")) == 1, plan.text


def test_unserved_kinds_probes_the_visible_index_once_per_pending_kind(registry: Planner) -> None:
    """Run once a minute by every worker: a skip scan of _jobs_visible, never the table."""
    plan = registry.explain("unserved_kinds")

    reads = plan.table_reads(registry.jobs)
    assert len(reads) == 2, plan.text  # the first kind, then the next kind after each
    assert all(n.get("Index Name") == registry.index("_jobs_visible") for n in reads), plan.text
    assert plan.seq_scans(registry.jobs) == [], plan.text
    assert len(plan.table_reads(f"{registry.prefix.value}_workers")) == 1, plan.text
    row = registry.conn.execute(registry.queries.unserved_kinds.sql).fetchall()
    assert [r["kind"] for r in row] == ["backups.verify"]


# -- limits across workers (ADR 0128) ----------------------------------------------------------

#: The limited kinds of the claim-limits tests: one a backlog kind, one with claimed rows.
LIMITED = ["crm.sync", "mail.send"]


@pytest.fixture(scope="module")
def limited(planner: Planner) -> Planner:
    """The planner's queue, plus the limiter rows of every kind (a prefix where all are limited)."""
    planner.conn.execute(
        planner.prefix.substitute(
            "INSERT INTO {{prefix}}_claim_limits (kind) SELECT unnest(%(kinds)s::text[])"
        ),
        {"kinds": list(KINDS)},
    )
    planner.conn.execute(f"VACUUM ANALYZE {planner.prefix.value}_claim_limits")
    return planner


def _reads_only_the_limits(planner: Planner, plan: Plan) -> None:
    limits = f"{planner.prefix.value}_claim_limits"
    scanned = {
        n.get("Relation Name") or n.get("Index Name") for n in plan.nodes if "Scan" in n.type
    }
    assert scanned - {"", limits, f"{limits}_pkey"} == set(), plan.text


def test_locking_the_limits_upserts_on_their_primary_key_only(limited: Planner) -> None:
    plan = limited.explain("lock_claim_limits", kinds=LIMITED)
    assert _arbiter_indexes(plan) == [limited.index("_claim_limits_pkey")], plan.text
    _reads_only_the_limits(limited, plan)


def test_the_limit_state_counts_claimed_rows_per_capped_kind_through_an_index(
    limited: Planner,
) -> None:
    """The running count of a capped kind reads its claimed rows only, never the table."""
    plan = limited.explain("claim_limit_state", kinds=LIMITED, capped=LIMITED)
    counts = [
        n
        for n in plan.table_reads(limited.jobs)
        if n.get("Index Name") == limited.index("_jobs_history")
    ]
    assert counts, plan.text
    assert all("'claimed'" in n.get("Index Cond") for n in counts), plan.text
    assert plan.seq_scans(limited.jobs) == [], plan.text


def test_spending_rate_tokens_touches_the_limits_alone(limited: Planner) -> None:
    plan = limited.explain(
        "advance_rate_limits",
        kinds=LIMITED,
        next_start_at=[datetime.now(UTC)] * len(LIMITED),
    )
    _reads_only_the_limits(limited, plan)


def test_priority_aging_probes_the_visible_index_per_kind_from_the_oldest_row(
    planner: Planner,
) -> None:
    """Only rows visible for age_after or longer are read, nothing sorted, changed by key."""
    plan = planner.explain(
        "promote_waiting", kinds=list(KINDS), age_after=timedelta(minutes=5), limit=500
    )
    probes = plan.index_scans(planner.index("_jobs_visible"))
    assert probes, plan.text
    assert all("visible_at <=" in n.get("Index Cond") for n in probes), plan.text
    assert plan.sorts() == [], plan.text
    assert plan.index_scans(planner.index("_jobs_pkey")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


# -- workflows (ADR 0125) ----------------------------------------------------------------------

#: Beside the two-week table: a 10,000-member chord waiting on its callback, and
#: 2,000 three-step chains, half done; the steps and edges tables are analyzed.
BUILD_WORKFLOWS = """
WITH chord_steps AS (
    INSERT INTO {{prefix}}_steps (id, workflow_id, kind, payload, priority, position, waiting_for,
                                  input_arg, input_all, status, created_at)
    SELECT 'CHORD-' || lpad(i::text, 6, '0'), 'WF-CHORD', 'crm.sync', '{}', 1, i,
           CASE WHEN i = 10000 THEN 10000 ELSE 0 END, CASE WHEN i = 10000 THEN 'rows' END,
           i = 10000, CASE WHEN i = 10000 THEN 'waiting' ELSE 'enqueued' END, now()
    FROM generate_series(0, 10000) AS i
    RETURNING 1
), chain_steps AS (
    INSERT INTO {{prefix}}_steps (id, workflow_id, kind, payload, priority, position, waiting_for,
                                  input_arg, input_all, status, created_at, finished_at)
    SELECT 'CHAIN-' || lpad(c::text, 5, '0') || '-' || p, 'WF-CHAIN-' || c, 'mail.send', '{}', 1,
           p, CASE WHEN p = 0 THEN 0 ELSE 1 END, 'x', false,
           CASE WHEN p = 0 THEN 'enqueued' WHEN c % 2 = 0 THEN 'dead' ELSE 'waiting' END,
           now() - interval '3 days',
           CASE WHEN p > 0 AND c % 2 = 0 THEN now() - interval '2 days' END
    FROM generate_series(1, 2000) AS c, generate_series(0, 2) AS p
    RETURNING 1
), chord_edges AS (
    INSERT INTO {{prefix}}_edges (parent_id, child_id, position)
    SELECT 'CHORD-' || lpad(i::text, 6, '0'), 'CHORD-010000', i FROM generate_series(0, 9999) AS i
    RETURNING 1
)
INSERT INTO {{prefix}}_edges (parent_id, child_id, position)
SELECT 'CHAIN-' || lpad(c::text, 5, '0') || '-' || (p - 1),
       'CHAIN-' || lpad(c::text, 5, '0') || '-' || p, 0
FROM generate_series(1, 2000) AS c, generate_series(1, 2) AS p
"""


@pytest.fixture(scope="module")
def flows(planner: Planner) -> Planner:
    planner.conn.execute(planner.prefix.substitute(BUILD_WORKFLOWS))
    planner.conn.execute(f"VACUUM ANALYZE {planner.prefix.value}_steps")
    planner.conn.execute(f"VACUUM ANALYZE {planner.prefix.value}_edges")
    return planner


def _no_scan_of_a_whole_table(flows: Planner, plan: Plan) -> None:
    for table in ("_jobs", "_steps", "_edges", "_journal"):
        assert plan.seq_scans(flows.index(table)) == [], plan.text


def test_the_finish_of_chord_members_probes_edges_and_steps_by_key(flows: Planner) -> None:
    """A finish hands results on through _edges_pkey (parent first) and locks the
    child by _steps_pkey; a ready child's inputs come through _edges_child."""
    members = [f"CHORD-{i:06d}" for i in range(8)]
    count = len(members)
    claims = {"ids": members, "claimed_by": ["host-1:4242"] * count, "run_counts": [1] * count}
    outcomes = [Outcome(OutcomeKind.COMPLETED, result='{"rows": 12}')] * (count - 1)
    plan = flows.explain(
        "finish_jobs_in_workflows",
        **finish_input(_finished(claims, [*outcomes, Outcome(OutcomeKind.DEAD)])),
        result_channel="venturi_result_",
        channel="venturi_wakeup",
    )
    assert flows.index("_edges_pkey") in plan.text, plan.text
    assert plan.index_scans(flows.index("_steps_pkey")), plan.text
    assert plan.index_scans(flows.index("_edges_child")), plan.text
    _no_scan_of_a_whole_table(flows, plan)


def test_a_chord_finish_hands_each_result_on_by_one_probe_of_its_own(flows: Planner) -> None:
    """500 members (a finish batch): each edge is found by its parent's id alone, not by
    a probe that also re-reads the batch's id array (the plan at the JSON input's
    estimate of 100 rows: 38 ms against 19) nor by a join filter over every pair (at an
    exact estimate: 30 ms), ADR 0132 round four."""
    members = [f"CHORD-{i:06d}" for i in range(500)]
    claims = {"ids": members, "claimed_by": ["host-1:4242"] * 500, "run_counts": [1] * 500}
    outcomes = [Outcome(OutcomeKind.COMPLETED, result="1")] * 250 + [
        Outcome(OutcomeKind.DEAD)
    ] * 250
    plan = flows.explain(
        "finish_jobs_in_workflows",
        **finish_input(_finished(claims, outcomes)),
        result_channel="venturi_result_",
        channel="venturi_wakeup",
    )
    edge_probes = plan.index_scans(flows.index("_edges_pkey")) + plan.index_scans(
        flows.index("_edges_child")
    )
    per_row_with_array = [
        n.get("Index Cond")
        for n in edge_probes
        if "= ANY" in n.get("Index Cond") and re.search(r"_id = (?!ANY)", n.get("Index Cond"))
    ]
    assert per_row_with_array == [], plan.text
    assert not [n for n in plan.nodes if "parent_id" in n.get("Join Filter")], plan.text
    _no_scan_of_a_whole_table(flows, plan)


def test_a_workflow_finish_of_plain_jobs_scans_no_workflow_table(flows: Planner) -> None:
    """Plain jobs in a workflow batch (or left alone by finish_jobs) feed empty arrays
    into the workflow steps: never a scan."""
    claims = flows.samples["claims"]
    count = len(claims["ids"])
    outcomes = [Outcome(OutcomeKind.COMPLETED, result="1"), Outcome(OutcomeKind.DEAD)]
    plan = flows.explain(
        "finish_jobs_in_workflows",
        **finish_input(_finished(claims, outcomes * (count // 2))),
        result_channel="venturi_result_",
        channel="venturi_wakeup",
    )
    _no_scan_of_a_whole_table(flows, plan)


def test_enqueueing_a_workflow_inserts_without_reading_existing_rows(flows: Planner) -> None:
    plan = flows.explain(
        "enqueue_workflow",
        workflow_id="WF-NEW",
        ids=["NEW-0", "NEW-1"],
        kinds=["crm.sync", "crm.sync"],
        payloads=["{}", "{}"],
        priorities=[1, 1],
        delays=[timedelta(0), timedelta(0)],
        waiting_fors=[0, 1],
        input_args=[None, "rows"],
        input_alls=[False, False],
        positions=[0, 1],
        edge_parents=["NEW-0"],
        edge_children=["NEW-1"],
        edge_positions=[0],
        channel="venturi_wakeup",
        on_error="crm.failed",
    )
    for table in ("_jobs", "_steps", "_edges"):
        assert plan.table_reads(flows.index(table)) == [], plan.text


@pytest.mark.parametrize("name", ["end_dependants", "resume_dependants"])
def test_ending_and_resuming_dependants_walk_the_edges_by_key(flows: Planner, name: str) -> None:
    params: dict[str, Any] = {"ids": ["CHAIN-00002-0", "CHAIN-00003-0"]}
    if name == "end_dependants":
        params["result_channel"] = "venturi_result_"
    plan = flows.explain(name, **params)
    assert flows.index("_edges_pkey") in plan.text, plan.text
    assert plan.index_scans(flows.index("_steps_pkey")), plan.text
    _no_scan_of_a_whole_table(flows, plan)


@pytest.mark.parametrize("workflow_id", ["WF-CHORD", "WF-CHAIN-7"])
def test_a_workflows_view_reads_its_steps_in_position_order_by_index(
    flows: Planner, workflow_id: str
) -> None:
    """Jobs by primary key, parents by _edges_child; a chain's few steps from
    _steps_workflow (the chord is most of this small table: a scan of it is fine)."""
    plan = flows.explain("workflow_steps", workflow_id=workflow_id)
    if workflow_id != "WF-CHORD":
        assert plan.index_scans(flows.index("_steps_workflow")), plan.text
    assert plan.index_scans(flows.index("_edges_child")), plan.text
    assert plan.index_scans(flows.index("_jobs_pkey")), plan.text
    for table in ("_jobs", "_edges", "_journal"):
        assert plan.seq_scans(flows.index(table)) == [], plan.text


def test_cleanup_of_dead_steps_range_scans_their_end_index(flows: Planner) -> None:
    plan = flows.explain("cleanup_dead_steps", older_than=timedelta(days=1), batch_size=1000)
    scans = plan.index_scans(flows.index("_steps_ended"))
    assert scans and "finished_at <" in scans[0].get("Index Cond"), plan.text
    _no_scan_of_a_whole_table(flows, plan)


@pytest.mark.parametrize("name", ["read_result", "await_result"])
def test_result_waiters_probe_the_steps_by_key_too(flows: Planner, name: str) -> None:
    plan = flows.explain(name, id="CHORD-010000")
    assert plan.index_scans(flows.index("_steps_pkey")), plan.text
    _no_scan_of_a_whole_table(flows, plan)


# -- the active beat (ADR 0131) ------------------------------------------------------------------


def test_the_leader_is_read_from_the_lock_table_alone(planner: Planner) -> None:
    """One pass over the server's lock table, filtered to the role's key; no queue table."""
    plan = planner.explain("leader", lock_name=planner.prefix.lock_name("lead:beat"))

    locks = [n for n in plan.nodes if n.get("Function Name") == "pg_lock_status"]
    assert len(locks) == 1, plan.text
    assert "locktype = 'advisory'" in locks[0].get("Filter"), plan.text
    assert "objid = " in locks[0].get("Filter"), plan.text
    scanned = {n.get("Relation Name") for n in plan.nodes if "Relation Name" in n.fields}
    assert scanned <= {"pg_database"}, plan.text


# -- recent workflows (ADR 0131) ---------------------------------------------------------------


@pytest.mark.parametrize("before", [None, "WF-CHAIN-1000"], ids=["newest", "next-page"])
def test_recent_workflows_walk_the_steps_index_backwards_and_probe_jobs_by_key(
    flows: Planner, before: str | None
) -> None:
    """The distinct ids come from _steps_workflow in index order (no sort, no scan of
    every step); each workflow is summed over its own range, jobs by primary key."""
    plan = flows.explain("list_workflows", limit=50, before=before)

    walks = plan.index_scans(flows.index("_steps_workflow"))
    assert any(n.get("Scan Direction") == "Backward" for n in walks), plan.text
    assert any("workflow_id = " in n.get("Index Cond") for n in walks), plan.text
    assert plan.index_scans(flows.index("_jobs_pkey")), plan.text
    assert plan.sorts() == [], plan.text
    _no_scan_of_a_whole_table(flows, plan)


def test_the_workflow_of_a_job_is_one_probe_of_the_steps_key(flows: Planner) -> None:
    plan = flows.explain("workflow_id_of", id="CHORD-000001")
    assert plan.index_scans(flows.index("_steps_pkey")), plan.text
    _no_scan_of_a_whole_table(flows, plan)


# -- fair claims (ADR 0129) --------------------------------------------------------------------

#: The fair kind of these tests: one tenant's burst of 20,000 eligible jobs, 1,000 tenants with
#: a few each (some of them only scheduled for later), HIGH jobs of a few tenants, and
#: 3,000 of the kind's jobs already finished (their index entries are gone).
FAIR_KIND = "tenants.sync"
BUILD_FAIR = """
INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at,
                             finished_at, run_count, fair_key)
SELECT 'fair' || lpad(i::text, 22, '0'), %(kind)s, '{}'::jsonb,
       CASE WHEN i %% 997 = 0 THEN 0 ELSE 1 END,
       CASE WHEN i <= 3000 THEN 'completed' ELSE 'pending' END,
       now() - interval '1 hour' + interval '1 millisecond' * i,
       CASE WHEN i > 23000 AND i %% 5 = 0 THEN now() + interval '1 day'
            ELSE now() - interval '1 hour' + interval '1 millisecond' * i END,
       CASE WHEN i <= 3000 THEN now() END,
       CASE WHEN i <= 3000 THEN 1 ELSE 0 END,
       CASE WHEN i <= 23000 THEN 'tenant-burst' ELSE 'tenant-' || (i %% 1000) END
FROM generate_series(1, 28000) AS i
"""


@pytest.fixture(scope="module")
def fair(planner: Planner) -> Iterator[Planner]:
    """The planner's queue plus a fair kind and its cursor; taken out again afterwards."""
    conn, value = planner.conn, planner.prefix.value
    conn.execute(planner.prefix.substitute(BUILD_FAIR), {"kind": FAIR_KIND})
    conn.execute(
        planner.prefix.substitute(
            "INSERT INTO {{prefix}}_fair_cursors (kind, fair_key) VALUES (%(kind)s, 'tenant-500')"
        ),
        {"kind": FAIR_KIND},
    )
    conn.execute(f"VACUUM ANALYZE {value}_jobs")
    conn.execute(f"VACUUM ANALYZE {value}_fair_cursors")
    yield planner
    conn.execute(f"DELETE FROM {value}_jobs WHERE kind = %s", (FAIR_KIND,))
    conn.execute(f"DELETE FROM {value}_fair_cursors")
    conn.execute(f"VACUUM ANALYZE {value}_jobs")


def _fair_params(limit: int) -> dict[str, Any]:
    return {
        "kind": FAIR_KIND,
        "limit": limit,
        "worker_id": "host-1:4242",
        "lease": LEASE,
        "horizon": timedelta(0),
    }


def _assert_fair_claim_reads_keys_not_backlogs(planner: Planner, plan: Plan) -> None:
    """Every read of the jobs is a probe of _jobs_fair (or the update by primary key): no
    other kind's index, no walk of the kind's backlog in _jobs_claim, nothing sorted
    under the row locks, and each key's jobs read only up to now (visible_at in the
    index condition)."""
    reads = plan.table_reads(planner.jobs)
    assert reads, plan.text
    assert {n.get("Index Name") for n in reads} == {
        planner.index("_jobs_fair"),
        planner.index("_jobs_pkey"),
    }, plan.text
    locked = [n for n in plan.nodes if "LockRows" in n.ancestors and "Scan" in n.type]
    assert locked, plan.text
    assert all(
        n.get("Index Name") == planner.index("_jobs_fair")
        and "visible_at <=" in n.get("Index Cond")
        for n in locked
    ), plan.text
    assert plan.sorts_below("LockRows") == [], plan.text
    probes = plan.index_scans(planner.index("_jobs_fair"))
    assert all("kind =" in n.get("Index Cond") for n in probes), plan.text
    assert all("priority =" in n.get("Index Cond") for n in probes), plan.text
    # A bound on the key left as a filter would walk every later row of the tier.
    assert all("fair_key" not in n.get("Filter") for n in probes), plan.text
    skip_steps = [n for n in probes if "fair_key >" in n.get("Index Cond")]
    assert len(skip_steps) >= 2, plan.text


@pytest.mark.parametrize("limit", [1, 8])
def test_the_fair_claim_probes_the_fair_index_once_per_key(fair: Planner, limit: int) -> None:
    plan = fair.explain("claim_fair_jobs", **_fair_params(limit))
    _assert_fair_claim_reads_keys_not_backlogs(fair, plan)
    assert plan.seq_scans(fair.jobs) == [], plan.text
    cursor = f"{fair.prefix.value}_fair_cursors"
    assert _arbiter_indexes(plan) == [f"{cursor}_pkey"], plan.text


#: The SQL type of each claim_fair_jobs parameter, for PREPARE.
_FAIR_PARAM_TYPES = {
    "kind": "text",
    "horizon": "interval",
    "limit": "bigint",
    "worker_id": "text",
    "lease": "interval",
}


def test_the_claim_pools_generic_plan_of_the_fair_claim_is_as_good(fair: Planner) -> None:
    """The claim pool forces generic plans (backend.py): the fair claim's must hold up."""
    with _on_a_claim_session(fair.conn, fair.queries.claim_fair_jobs.sql, _FAIR_PARAM_TYPES) as run:
        plan = _plan_of(run, _fair_params(8))
    _assert_fair_claim_reads_keys_not_backlogs(fair, plan)
    assert plan.seq_scans(fair.jobs) == [], plan.text


def test_the_plain_claim_of_other_kinds_is_unchanged_beside_a_fair_kind(fair: Planner) -> None:
    """The fair index is partial on keyed rows: the plain claim never reads it."""
    plan = fair.explain("claim_jobs", **_claim_params(EVERY_KIND, 8))
    assert plan.index_scans(fair.index("_jobs_fair")) == [], plan.text
    _assert_per_kind_claim_probes(fair, plan)


def _keyed_params(limit: int, **rate: Any) -> dict[str, Any]:
    return {
        **_fair_params(limit),
        "per_key": 1,
        "rate_interval": None,
        "rate_burst": None,
        **rate,
    }


#: The SQL type of each claim_keyed_jobs parameter, for PREPARE.
_KEYED_PARAM_TYPES = {
    **_FAIR_PARAM_TYPES,
    "per_key": "int",
    "rate_interval": "interval",
    "rate_burst": "int",
}


def _assert_keyed_claim_reads_keys_and_slots_only(planner: Planner, plan: Plan) -> None:
    """The keyed claim (ADR 0138) reads what the fair claim reads (probes of _jobs_fair,
    the locked ones bounded by visible_at, the update by primary key), plus the kind's
    claimed rows (its busy keys) through _jobs_history by (status, kind): never the
    kind's backlog."""
    reads = plan.table_reads(planner.jobs)
    assert {n.get("Index Name") for n in reads} == {
        planner.index("_jobs_fair"),
        planner.index("_jobs_pkey"),
        planner.index("_jobs_history"),
    }, plan.text
    locked = [n for n in plan.nodes if "LockRows" in n.ancestors and "Scan" in n.type]
    assert locked, plan.text
    assert all(
        n.get("Index Name") == planner.index("_jobs_fair")
        and "visible_at <=" in n.get("Index Cond")
        for n in locked
    ), plan.text
    assert plan.sorts_below("LockRows") == [], plan.text
    probes = plan.index_scans(planner.index("_jobs_fair"))
    assert all("fair_key" not in n.get("Filter") for n in probes), plan.text
    assert len([n for n in probes if "fair_key >" in n.get("Index Cond")]) >= 2, plan.text
    held = plan.index_scans(planner.index("_jobs_history"))
    assert all(
        "'claimed'" in n.get("Index Cond") and "kind =" in n.get("Index Cond") for n in held
    ), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


@pytest.mark.parametrize(
    "rate",
    [
        pytest.param({}, id="per-key-cap"),
        pytest.param({"rate_interval": timedelta(seconds=1), "rate_burst": 2}, id="per-key-rate"),
    ],
)
def test_the_keyed_claim_probes_the_fair_index_and_the_claimed_rows(
    fair: Planner, rate: dict[str, Any]
) -> None:
    plan = fair.explain("claim_keyed_jobs", **_keyed_params(8, **rate))
    _assert_keyed_claim_reads_keys_and_slots_only(fair, plan)
    if rate:
        assert plan.index_scans(f"{fair.prefix.value}_key_rates_pkey"), plan.text


def test_the_claim_pools_generic_plan_of_the_keyed_claim_is_as_good(fair: Planner) -> None:
    with _on_a_claim_session(
        fair.conn, fair.queries.claim_keyed_jobs.sql, _KEYED_PARAM_TYPES
    ) as run:
        plan = _plan_of(run, _keyed_params(8))
    _assert_keyed_claim_reads_keys_and_slots_only(fair, plan)


def test_the_key_occupancy_reads_the_kind_s_claimed_and_keyed_pending_rows_only(
    fair: Planner,
) -> None:
    plan = fair.explain("key_occupancy", kind=FAIR_KIND, limit=20)
    assert {n.get("Index Name") for n in plan.table_reads(fair.jobs)} == {
        fair.index("_jobs_history"),
        fair.index("_jobs_fair"),
    }, plan.text
    assert plan.seq_scans(fair.jobs) == [], plan.text


@pytest.mark.parametrize(
    ("name", "params"),
    [
        (
            "advance_key_rates",
            {
                "kind": FAIR_KIND,
                "keys": ["tenant-1"],
                "taken": [2],
                "rate_interval": timedelta(milliseconds=100),
            },
        ),
        ("lock_shared_limits", {"names": ["stripe"]}),
        (
            "shared_limit_state",
            {"limits": '[{"name": "stripe", "kinds": ["crm.sync", "mail.send"]}]'},
        ),
        ("advance_shared_limits", {"names": ["stripe"], "next_start_at": [datetime.now(UTC)]}),
        (
            "set_dead_callbacks",
            {"kinds": ["crm.sync", "mail.send"], "callback_kinds": ["crm.failed", None]},
        ),
    ],
)
def test_the_limit_and_callback_bookkeeping_never_scans_the_jobs(
    planner: Planner, name: str, params: dict[str, Any]
) -> None:
    """Their own small tables by key; the jobs only by (status, kind) (shared_limit_state's
    count of the claimed rows of each kind)."""
    plan = planner.explain(name, **params)
    assert plan.seq_scans(planner.jobs) == [], plan.text
    for node in plan.table_reads(planner.jobs):
        assert node.get("Index Name") == planner.index("_jobs_history"), plan.text
        assert "'claimed'" in node.get("Index Cond"), plan.text


# -- expiry (ADR 0135) -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["claim_jobs", "claim_fair_jobs"])
def test_the_expiry_test_of_a_claim_is_computed_on_the_claimed_rows_only(
    fair: Planner, name: str
) -> None:
    """``is_expired`` is an output column of the claim's update: no scan filters on
    ``expires_at``, so the claim reads what it read before V11, expiring rows or not."""
    params = _claim_params(EVERY_KIND, 8) if name == "claim_jobs" else _fair_params(8)
    plan = fair.explain(name, **params)
    scans = [n for n in plan.nodes if "Scan" in n.type]
    assert scans, plan.text
    assert all(
        "expires_at" not in n.get("Filter") + n.get("Index Cond") + n.get("Recheck Cond")
        for n in scans
    ), plan.text
    assert plan.seq_scans(fair.jobs) == [], plan.text


# -- control at run time (ADR 0139) -----------------------------------------------------------


@pytest.mark.parametrize("served", SERVED)
def test_the_claim_reads_each_served_kinds_state_by_primary_key_before_its_probe(
    planner: Planner, served: tuple[str, ...]
) -> None:
    """The pause check is one _kind_controls primary-key probe per served kind, gating the
    kind's _jobs_claim probe (a one-time filter), on the ad hoc and the generic plan."""
    ad_hoc = planner.explain("claim_jobs", **_claim_params(served, 8))
    with _on_a_claim_session(
        planner.conn, planner.queries.claim_jobs.sql, _CLAIM_PARAM_TYPES
    ) as run:
        generic = _plan_of(run, _claim_params(served, 8))
    for plan in (ad_hoc, generic):
        _assert_per_kind_claim_probes(planner, plan)
        probes = plan.index_scans(planner.index("_kind_controls_pkey"))
        assert probes, plan.text
        assert all("kind" in n.get("Index Cond") for n in probes), plan.text
        assert plan.seq_scans(f"{planner.prefix.value}_kind_controls") == [], plan.text


def test_the_claim_of_a_paused_kind_never_runs_its_probe(planner: Planner) -> None:
    """Measured, not planned: with the kind paused, its _jobs_claim probe is never executed."""
    kinds = claim_input(["crm.sync"], [8])
    table = f"{planner.prefix.value}_kind_controls"
    with planner.conn.transaction(force_rollback=True):
        planner.conn.execute(f"INSERT INTO {table} (kind, paused) VALUES ('crm.sync', true)")
        rows = planner.conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + planner.queries.claim_jobs.sql,
            {
                "kinds": kinds,
                "limit": 8,
                "worker_id": "w",
                "lease": timedelta(minutes=1),
                "horizon": timedelta(0),
            },
        ).fetchone()
    assert rows is not None
    plan = Plan.parse(rows["QUERY PLAN"])
    [probe] = plan.index_scans(planner.index("_jobs_claim"))
    assert probe.fields["Actual Loops"] == 0, plan.text


def test_the_wait_reads_each_kinds_state_by_primary_key(planner: Planner) -> None:
    plan = planner.explain("time_until_visible", kinds=list(EVERY_KIND))
    assert plan.index_scans(planner.index("_jobs_visible")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


def test_kind_known_probes_the_history_index_and_never_scans_the_table(planner: Planner) -> None:
    plan = planner.explain("kind_known", kind="no.such.kind")
    assert plan.index_scans(planner.index("_jobs_history")), plan.text
    assert plan.seq_scans(planner.jobs) == [], plan.text


def test_the_audit_trail_is_a_backward_range_of_its_subject_index(planner: Planner) -> None:
    plan = planner.explain("audit_trail", subject_type="kind", subject="crm.sync", limit=20)
    [scan] = plan.index_scans(planner.index("_audit_subject"))
    assert scan.get("Scan Direction") == "Backward", plan.text
    assert plan.sorts() == [], plan.text


#: The control statements on tables of a few rows each (one per kind or schedule an
#: operator touched): their plans do not matter; they are planned here so a statement
#: that no longer plans (a renamed column) fails in this module.
CONTROL_STATEMENTS = {
    "kind_controls": {"kinds": ["crm.sync"]},
    "set_kind_paused": {"kind": "crm.sync", "paused": True},
    "set_kind_limits": {
        "kind": "crm.sync",
        "global_concurrency": 2,
        "rate_limit": None,
        "key_concurrency": None,
        "set_global_concurrency": True,
        "set_rate_limit": False,
        "set_key_concurrency": False,
    },
    "insert_audit": {
        "actor": "ops",
        "subject_type": "kind",
        "subject": "crm.sync",
        "action": "pause",
        "details": "{}",
    },
    "add_schedule": {
        "name": "n",
        "cron": "* * * * *",
        "timezone": "UTC",
        "kind": "crm.sync",
        "kwargs": "{}",
    },
    "stored_schedules": {},
    "set_schedule_paused": {"name": "n", "paused": True},
    "remove_schedule": {"name": "n"},
    "record_backfill": {"name": "n", "ticks": [datetime.now(UTC)], "job_ids": ["J"]},
}


@pytest.mark.parametrize("name", sorted(CONTROL_STATEMENTS))
def test_the_control_statements_plan(planner: Planner, name: str) -> None:
    plan = planner.explain_sql(getattr(planner.queries, name).sql, **CONTROL_STATEMENTS[name])
    assert plan.seq_scans(planner.jobs) == [], plan.text


# -- durable steps and events (ADR 0137) ------------------------------------------------------

#: Five recorded steps for one terminal job in ten, and an event for one in twenty.
BUILD_DURABLE = """
WITH stepped AS (
    INSERT INTO {{prefix}}_checkpoints (job_id, kind, name, run_no, recorded_at, result)
    SELECT j.id, 'step', 's' || n, 1, j.created_at, to_jsonb(n)
    FROM {{prefix}}_jobs AS j, generate_series(1, 5) AS n
    WHERE j.finished_at IS NOT NULL AND hashtext(j.id) % 10 = 0
)
INSERT INTO {{prefix}}_events (job_id, name, payload, sent_at)
SELECT j.id, 'approved', '{}'::jsonb, j.created_at
FROM {{prefix}}_jobs AS j
WHERE j.finished_at IS NOT NULL AND hashtext(j.id) % 20 = 0
"""
DURABLE_CASCADES = (
    "DELETE FROM ONLY {{prefix}}_checkpoints WHERE %(id)s = job_id",
    "DELETE FROM ONLY {{prefix}}_events WHERE %(id)s = job_id",
)


@pytest.fixture(scope="module")
def durable(planner: Planner) -> Planner:
    planner.conn.execute(planner.prefix.substitute(BUILD_DURABLE))
    for table in ("checkpoints", "events"):
        planner.conn.execute(f"VACUUM ANALYZE {planner.prefix.value}_{table}")
    return planner


def test_a_runs_read_of_its_steps_and_events_probes_both_primary_keys(durable: Planner) -> None:
    plan = durable.explain("load_durable", id=durable.samples["completed_id"])
    assert plan.index_scans(durable.index("_checkpoints_pkey")), plan.text
    assert plan.index_scans(durable.index("_events_pkey")), plan.text
    for table in ("_checkpoints", "_events"):
        assert plan.seq_scans(durable.index(table)) == [], plan.text


@pytest.mark.parametrize("statement", ["record_step", "send_event", "reset_steps"])
def test_a_step_a_send_and_a_reset_find_their_rows_by_primary_key(
    durable: Planner, statement: str
) -> None:
    claim = durable.samples["claims"]
    params: dict[str, Any] = {
        "record_step": {
            "id": claim["ids"][0],
            "claimed_by": claim["claimed_by"][0],
            "run_count": claim["run_counts"][0],
            "kind": "step",
            "name": "charge",
            "result": "1",
            "wake_after": None,
        },
        "send_event": {
            "id": durable.samples["pending_id"],
            "name": "approved",
            "payload": "null",
            "channel": "c",
        },
        "reset_steps": {"id": durable.samples["dead_id"]},
    }[statement]
    # Its parameters include a "name": the statement's text goes to explain_sql.
    plan = durable.explain_sql(getattr(durable.queries, statement).sql, **params)
    assert plan.seq_scans(durable.jobs) == [], plan.text
    assert plan.seq_scans(durable.index("_checkpoints")) == [], plan.text
    if statement != "reset_steps":
        assert plan.index_scans(durable.index("_jobs_pkey")), plan.text


@pytest.mark.parametrize("sql", DURABLE_CASCADES, ids=["checkpoints", "events"])
def test_the_cascade_from_a_deleted_job_finds_its_steps_and_events_by_primary_key(
    durable: Planner, sql: str
) -> None:
    plan = durable.explain_sql(durable.prefix.substitute(sql), id=durable.samples["completed_id"])
    assert plan.table_reads(durable.index("_checkpoints")) + plan.table_reads(
        durable.index("_events")
    ), plan.text
    assert all(n.type != "Seq Scan" for n in plan.nodes), plan.text
