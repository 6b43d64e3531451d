"""After V3 the schema equals the seed's DDL exactly; V1, V2 and V4 are what they claim.

The comparison reads the catalogs of two prefixes in one database: one built
by the migration runner, one by running the seed document's DDL verbatim.
Every name is normalised back to the ``{{prefix}}`` token before comparing.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import drop_prefix_tables

from venturi.errors import SchemaMissing
from venturi.naming import DERIVED_SUFFIXES, Prefix
from venturi.postgres import PostgresBackend
from venturi.postgres.migrator import Migrator, load_migrations

SEED_DDL = (Path(__file__).parent / "seed_schema.sql").read_text()


def snapshot(conn: psycopg.Connection[Any], prefix: str) -> dict[str, Any]:
    """Columns, constraints and indexes of the prefix's two tables, prefix-normalised."""

    def norm(text: str) -> str:
        return text.replace(prefix, "{{prefix}}")

    tables = [f"{prefix}_jobs", f"{prefix}_journal"]
    columns = conn.execute(
        """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum
        """,
        (tables,),
    ).fetchall()
    constraints = conn.execute(
        """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        WHERE c.relname = ANY(%s)
        ORDER BY c.relname, k.conname
        """,
        (tables,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) ORDER BY indexname",
        (tables,),
    ).fetchall()
    return {
        "columns": [tuple(norm(str(v)) for v in row) for row in columns],
        "constraints": [tuple(norm(str(v)) for v in row) for row in constraints],
        "indexes": {norm(name): norm(definition) for name, definition in indexes},
    }


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def fresh_prefix(conn: psycopg.Connection[Any]) -> Iterator[str]:
    value = f"s_{secrets.token_hex(5)}"
    yield value
    drop_prefix_tables(conn, value)


def seed_snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    prefix = f"seed_{secrets.token_hex(5)}"
    try:
        conn.execute(Prefix.parse(prefix).substitute(SEED_DDL))
        return snapshot(conn, prefix)
    finally:
        drop_prefix_tables(conn, prefix)


def across(
    conn: psycopg.Connection[Any], prefix: str, version: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The prefix's snapshot before and after migration ``version`` (the earlier ones first)."""
    migrations = load_migrations()
    Migrator(Prefix.parse(prefix), migrations[: version - 1]).migrate(conn)
    before = snapshot(conn, prefix)
    Migrator(Prefix.parse(prefix), migrations[:version]).migrate(conn)
    return before, snapshot(conn, prefix)


def appended_columns(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, ...]]:
    """The columns ``after`` adds (table, name, type, not null, default), each checked to come
    after every column its table had, the others left exactly as they were (SPEC 5.1)."""
    added = [c for c in after["columns"] if c not in before["columns"]]
    last_attnum = {
        table: max(int(c[1]) for c in before["columns"] if c[0] == table)
        for table in {c[0] for c in added}
    }
    assert all(int(c[1]) > last_attnum[c[0]] for c in added)
    assert [c for c in after["columns"] if c in before["columns"]] == before["columns"]
    return [(c[0], c[2], c[3], c[4], c[5]) for c in added]


def start_check_refusal(
    conn: psycopg.Connection[Any], prefix: str, database_url: str, applied: int
) -> str:
    """The ``SchemaMissing`` message of the start check on a prefix migrated up to ``applied``."""
    Migrator(Prefix.parse(prefix), load_migrations()[:applied]).migrate(conn)
    backend = PostgresBackend(database_url, prefix=prefix)
    try:
        with pytest.raises(SchemaMissing) as raised:
            backend.check_schema()
    finally:
        backend.close()
    return str(raised.value)


def test_migrated_schema_equals_the_seed_ddl(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    Migrator(Prefix.parse(fresh_prefix), load_migrations()[:3]).migrate(conn)
    migrated = snapshot(conn, fresh_prefix)
    expected = seed_snapshot(conn)

    assert migrated["columns"] == expected["columns"]
    assert migrated["constraints"] == expected["constraints"]
    assert migrated["indexes"] == expected["indexes"]


def test_seed_snapshot_names_every_part_the_seed_defines(conn: psycopg.Connection[Any]) -> None:
    """Guards the comparison itself: an empty or partial snapshot would compare equal."""
    expected = seed_snapshot(conn)
    assert len(expected["columns"]) == 14 + 8
    kinds = sorted(c[2] for c in expected["constraints"])
    assert kinds == ["c", "c", "c", "f", "p", "p"]
    fk = next(c for c in expected["constraints"] if c[2] == "f")
    assert "ON DELETE CASCADE" in fk[3]
    assert set(expected["indexes"]) == {
        "{{prefix}}_jobs_pkey",
        "{{prefix}}_journal_pkey",
        "{{prefix}}_jobs_claim",
        "{{prefix}}_jobs_claim_priority",
        "{{prefix}}_jobs_visible",
        "{{prefix}}_jobs_dedup",
        "{{prefix}}_jobs_lease",
        "{{prefix}}_jobs_history",
        "{{prefix}}_jobs_finished",
        "{{prefix}}_jobs_created",
        "{{prefix}}_journal_job",
    }
    assert "WHERE (status = 'pending'::text)" in expected["indexes"]["{{prefix}}_jobs_claim"]


V1_INDEXES = {
    "{{prefix}}_jobs_claim": "ON public.{{prefix}}_jobs USING btree (kind, priority, created_at) "
    "WHERE (status = 'pending'::text)",
    "{{prefix}}_jobs_claim_priority": "ON public.{{prefix}}_jobs "
    "USING btree (priority, created_at) WHERE (status = 'pending'::text)",
    "{{prefix}}_jobs_dedup": "ON public.{{prefix}}_jobs USING btree (kind, dedup_key) "
    "WHERE ((dedup_key IS NOT NULL) AND (status = 'pending'::text))",
    "{{prefix}}_journal_job": "ON public.{{prefix}}_journal USING btree (job_id)",
    "{{prefix}}_journal_kind": "ON public.{{prefix}}_journal USING btree (kind, recorded_at)",
}


def _index_bodies(snap: dict[str, Any]) -> dict[str, str]:
    return {name: d.split(f" {name} ", 1)[1] for name, d in snap["indexes"].items()}


def test_v1_has_the_original_indexes(conn: psycopg.Connection[Any], fresh_prefix: str) -> None:
    Migrator(Prefix.parse(fresh_prefix), load_migrations()[:1]).migrate(conn)
    bodies = _index_bodies(snapshot(conn, fresh_prefix))

    for name, body in V1_INDEXES.items():
        assert bodies[name] == body
    assert "{{prefix}}_jobs_finished" not in bodies
    assert "{{prefix}}_jobs_created" not in bodies


def test_v2_adds_only_the_pagination_index(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    migrator = Migrator(Prefix.parse(fresh_prefix), load_migrations()[:1])
    migrator.migrate(conn)
    before = _index_bodies(snapshot(conn, fresh_prefix))
    Migrator(Prefix.parse(fresh_prefix), load_migrations()[:2]).migrate(conn)
    after = _index_bodies(snapshot(conn, fresh_prefix))

    assert set(after) - set(before) == {"{{prefix}}_jobs_created"}
    assert (
        after["{{prefix}}_jobs_created"] == "ON public.{{prefix}}_jobs USING btree (created_at, id)"
    )
    assert {k: v for k, v in after.items() if k in before} == before


# -- V4: the worker registry (ADR 0119) -------------------------------------------------------


def test_later_migrations_leave_the_seed_tables_exactly_as_the_seed_defines_them(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """SPEC 5.1: after V3 new storage is new tables or appended columns, never a change;
    the one index added since (V10's partial fair-claim index, on a V10 column) leaves every
    seed index exactly as it was."""
    Migrator(Prefix.parse(fresh_prefix)).migrate(conn)
    migrated, seed = snapshot(conn, fresh_prefix), seed_snapshot(conn)
    assert migrated["constraints"] == seed["constraints"]
    assert {k: v for k, v in migrated["indexes"].items() if k in seed["indexes"]} == seed["indexes"]
    assert {k: v for k, v in migrated["indexes"].items() if k not in seed["indexes"]} == {
        "{{prefix}}_jobs_fair": FAIR_INDEX
    }
    for table in ("{{prefix}}_jobs", "{{prefix}}_journal"):
        seed_columns = [c for c in seed["columns"] if c[0] == table]
        columns = [c for c in migrated["columns"] if c[0] == table]
        # The seed's columns first, unchanged; every later one nullable or defaulted.
        assert columns[: len(seed_columns)] == seed_columns
        assert all(c[4] == "False" or c[5] != "None" for c in columns[len(seed_columns) :])


def _registry_objects(conn: psycopg.Connection[Any], prefix: str) -> dict[str, Any]:
    table = f"{prefix}_workers"
    columns = conn.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attribute a
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (table,),
    ).fetchall()
    constraints = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass ORDER BY conname",
        (table,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY indexname", (table,)
    ).fetchall()
    named = conn.execute(
        "SELECT relname FROM pg_class WHERE relname LIKE %s AND relkind IN ('r', 'i', 'S')"
        " ORDER BY relname",
        (f"{prefix}%",),
    ).fetchall()

    def norm(value: object) -> str:
        return str(value).replace(prefix, "{{prefix}}")

    return {
        "columns": [tuple(norm(v) for v in row) for row in columns],
        "constraints": [tuple(norm(v) for v in row) for row in constraints],
        "indexes": [norm(row[0]) for row in indexes],
        "relations": [norm(row[0]) for row in named],
    }


def test_v4_adds_only_the_worker_registry_table_with_its_primary_key(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    Migrator(Prefix.parse(fresh_prefix), load_migrations()[:3]).migrate(conn)
    before = snapshot(conn, fresh_prefix)
    Migrator(Prefix.parse(fresh_prefix), load_migrations()[:4]).migrate(conn)
    registry = _registry_objects(conn, fresh_prefix)

    assert snapshot(conn, fresh_prefix) == before
    assert registry["columns"] == [
        ("id", "text", "True", "None"),
        ("version", "text", "True", "None"),
        ("kinds", "text[]", "True", "None"),
        ("concurrency", "integer", "True", "None"),
        ("running", "integer", "True", "0"),
        ("started_at", "timestamp with time zone", "True", "None"),
        ("heartbeat_at", "timestamp with time zone", "True", "None"),
        ("expires_at", "timestamp with time zone", "True", "None"),
    ]
    assert registry["constraints"] == [("{{prefix}}_workers_pkey", "PRIMARY KEY (id)")]
    assert registry["indexes"] == ["{{prefix}}_workers_pkey"]
    # Every relation the migrations create is named from the prefix, as naming.py lists them.
    assert {name.removeprefix("{{prefix}}") for name in registry["relations"]} <= set(
        DERIVED_SUFFIXES
    )
    assert {"{{prefix}}_workers", "{{prefix}}_workers_pkey"} <= set(registry["relations"])


def test_v5_only_appends_the_nullable_run_control_columns(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Tracebacks and cancellation requests (ADR 0121): new columns after the seed's,
    nullable, no default, nothing else changed (SPEC 5.1)."""
    migrations = load_migrations()
    [v5] = [m for m in migrations if m.version == 5]
    assert v5.name == "run_control"
    before, after = across(conn, fresh_prefix, 5)

    assert after["constraints"] == before["constraints"]
    assert after["indexes"] == before["indexes"]
    assert appended_columns(before, after) == [
        ("{{prefix}}_jobs", "cancel_requested_at", "timestamp with time zone", "False", "None"),
        ("{{prefix}}_journal", "traceback", "text", "False", "None"),
    ]


def test_the_start_check_refuses_a_prefix_migrated_by_an_older_version(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    """A worker of this version on a prefix one migration behind (V1-V4 applied): one
    clear ``SchemaMissing`` naming what is missing, not a failing claim later."""
    message = start_check_refusal(conn, fresh_prefix, database_url, 4)
    assert "cancel_requested_at" in message, message
    assert "run `venturi migrate`" in message, message
    Migrator(Prefix.parse(fresh_prefix)).migrate(conn)
    backend = PostgresBackend(database_url, prefix=fresh_prefix)
    try:
        assert backend.check_schema().endswith("/" + conn.info.dbname)
    finally:
        backend.close()


def test_v6_only_appends_the_result_columns(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Results (ADR 0124): two columns after the others on jobs, ``result`` nullable with
    no default, ``result_awaited`` with a constant default (no row rewritten); nothing else
    changed (SPEC 5.1)."""
    migrations = load_migrations()
    [v6] = [m for m in migrations if m.version == 6]
    assert v6.name == "results_and_workflows"
    before, after = across(conn, fresh_prefix, 6)

    assert after["constraints"] == before["constraints"]
    assert after["indexes"] == before["indexes"]
    assert appended_columns(before, after) == [
        ("{{prefix}}_jobs", "result", "jsonb", "False", "None"),
        ("{{prefix}}_jobs", "result_awaited", "boolean", "True", "false"),
    ]


def test_the_start_check_names_the_result_storage_on_a_prefix_before_v6(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    message = start_check_refusal(conn, fresh_prefix, database_url, 5)
    assert "result" in message, message


def test_v7_only_appends_the_nullable_headers_column(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Trace context (ADR 0127): one nullable jsonb column after the jobs table's others,
    no default, nothing else changed (SPEC 5.1)."""
    migrations = load_migrations()
    [v7] = [m for m in migrations if m.version == 7]
    assert v7.name == "trace_context"
    before, after = across(conn, fresh_prefix, 7)

    assert after["constraints"] == before["constraints"]
    assert after["indexes"] == before["indexes"]
    assert appended_columns(before, after) == [
        ("{{prefix}}_jobs", "headers", "jsonb", "False", "None"),
    ]


def test_the_start_check_refuses_a_prefix_without_the_headers_column(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    """A prefix migrated up to V6 lacks V7's column: ``SchemaMissing`` names it."""
    message = start_check_refusal(conn, fresh_prefix, database_url, 6)
    assert "headers" in message, message


def test_the_start_check_names_the_claim_limits_table_when_v8_is_missing(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    """ADR 0128: the claim of a limited kind reads _claim_limits, so its absence is refused
    at start, not at the first limited claim."""
    message = start_check_refusal(conn, fresh_prefix, database_url, 7)
    assert "run `venturi migrate`" in message, message
    Migrator(Prefix.parse(fresh_prefix)).migrate(conn)
    backend = PostgresBackend(database_url, prefix=fresh_prefix)
    try:
        assert backend.check_schema().endswith("/" + conn.info.dbname)
    finally:
        backend.close()


#: V10's only index (ADR 0129): partial on keyed pending rows, so unkeyed jobs never enter it.
FAIR_INDEX = (
    "CREATE INDEX {{prefix}}_jobs_fair ON public.{{prefix}}_jobs USING btree "
    "(kind, priority, fair_key, visible_at) "
    "WHERE ((status = 'pending'::text) AND (fair_key IS NOT NULL))"
)


def test_v10_appends_the_fair_key_column_its_partial_index_and_the_cursor_table(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Fair claims (ADR 0129): one nullable text column after the others, no default (no
    row rewritten), one partial index on it, the per-kind cursor table; nothing else."""
    migrations = load_migrations()
    [v10] = [m for m in migrations if m.version == 10]
    assert v10.name == "fair_claims"
    before, after = across(conn, fresh_prefix, 10)

    assert after["constraints"] == before["constraints"]
    assert {k: v for k, v in after["indexes"].items() if k not in before["indexes"]} == {
        "{{prefix}}_jobs_fair": FAIR_INDEX
    }
    assert {k: v for k, v in after["indexes"].items() if k in before["indexes"]} == before[
        "indexes"
    ]
    assert appended_columns(before, after) == [
        ("{{prefix}}_jobs", "fair_key", "text", "False", "None"),
    ]
    cursors = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull"
        " FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0"
        " ORDER BY a.attnum",
        (f"{fresh_prefix}_fair_cursors",),
    ).fetchall()
    assert cursors == [("kind", "text", True), ("fair_key", "text", True)]
    (primary_key,) = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype = 'p'",
        (f"{fresh_prefix}_fair_cursors",),
    ).fetchone() or (None,)
    assert primary_key == "PRIMARY KEY (kind)"


def test_the_start_check_names_the_fair_key_when_v10_is_missing(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    message = start_check_refusal(conn, fresh_prefix, database_url, 9)
    assert "fair_key" in message, message


def test_v11_only_appends_the_nullable_expiry_column(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Expiry (ADR 0135): one nullable timestamptz column after the jobs table's others, no
    default (no row rewritten), no index; nothing else changed (SPEC 5.1)."""
    migrations = load_migrations()
    [v11] = [m for m in migrations if m.version == 11]
    assert v11.name == "expires"
    before, after = across(conn, fresh_prefix, 11)

    assert after["constraints"] == before["constraints"]
    assert after["indexes"] == before["indexes"]
    assert appended_columns(before, after) == [
        ("{{prefix}}_jobs", "expires_at", "timestamp with time zone", "False", "None"),
    ]


def test_the_start_check_names_the_expiry_when_v11_is_missing(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    message = start_check_refusal(conn, fresh_prefix, database_url, 10)
    assert "expires_at" in message, message


def test_v14_adds_the_control_tables_and_changes_no_seed_table(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Control at run time (ADR 0139): four tables of its own (kind states, stored
    schedules, backfills, audit) with their keys; no column, index or constraint of an
    existing table changes (SPEC 5.1)."""
    [v14] = [m for m in load_migrations() if m.version == 14]
    assert v14.name == "run_time_control"
    before, after = across(conn, fresh_prefix, 14)

    assert after == before
    keys = conn.execute(
        "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype = 'p' AND conrelid::regclass::text = ANY(%s) ORDER BY 1",
        ([f"{fresh_prefix}_{t}" for t in ("kind_controls", "schedules", "backfills", "audit")],),
    ).fetchall()
    assert keys == [
        (f"{fresh_prefix}_audit", "PRIMARY KEY (id)"),
        (f"{fresh_prefix}_backfills", "PRIMARY KEY (name, tick)"),
        (f"{fresh_prefix}_kind_controls", "PRIMARY KEY (kind)"),
        (f"{fresh_prefix}_schedules", "PRIMARY KEY (name)"),
    ]


def test_the_start_check_refuses_a_prefix_without_v14(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    """The claim reads _kind_controls: its absence is refused at start, not at the claim."""
    message = start_check_refusal(conn, fresh_prefix, database_url, 13)
    assert "run `venturi migrate`" in message, message


def test_v12_adds_the_durable_tables_cascading_from_jobs_and_one_nullable_column(
    conn: psycopg.Connection[Any], fresh_prefix: str
) -> None:
    """Durable steps (ADR 0137): two new tables whose rows go with their job (the
    cascade cleanup relies on), and one nullable column appended to the jobs table,
    no default (no row rewritten); the seed's constraints and indexes unchanged."""
    [v12] = [m for m in load_migrations() if m.version == 12]
    assert v12.name == "durable"
    before, after = across(conn, fresh_prefix, 12)
    assert after["constraints"] == before["constraints"]
    assert after["indexes"] == before["indexes"]
    assert appended_columns(before, after) == [
        ("{{prefix}}_jobs", "woken_run", "integer", "False", "None"),
    ]
    keys = conn.execute(
        """
        SELECT conrelid::regclass::text, confdeltype, pg_get_constraintdef(oid)
        FROM pg_constraint
        WHERE contype = 'f' AND confrelid = %s::regclass
        ORDER BY 1
        """,
        (f"{fresh_prefix}_jobs",),
    ).fetchall()
    durable = [(t.replace(fresh_prefix, "{{prefix}}"), d) for t, d, _ in keys if "journal" not in t]
    assert durable == [("{{prefix}}_checkpoints", "c"), ("{{prefix}}_events", "c")]
    relations = conn.execute(
        "SELECT relname FROM pg_class WHERE relname LIKE %s", (f"{fresh_prefix}\\_%",)
    ).fetchall()
    names = {r[0].removeprefix(fresh_prefix) for r in relations}
    assert {n for n in names if n.startswith(("_checkpoints", "_events"))} <= set(DERIVED_SUFFIXES)


def test_the_start_check_names_the_durable_storage_when_v12_is_missing(
    conn: psycopg.Connection[Any], fresh_prefix: str, database_url: str
) -> None:
    message = start_check_refusal(conn, fresh_prefix, database_url, 11)
    assert "woken_run" in message, message
