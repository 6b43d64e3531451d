"""venturi runs with the two roles of docs/operations/least-privilege.md.

The fixture creates both roles (random names), migrates a fresh prefix as the
owner and grants the runtime role its rows, by running the SQL blocks of the
document itself, each as the role it names; it removes them afterwards with
the document's removal block. The server trusts local connections, so the
test connects as either role with ``user=`` in the URL.

As the runtime role: enqueue (plain, deduplicated, in the caller's
transaction), a threaded worker (claims, outcomes, retries, recovery of an
expired lease, release at shutdown), beat's leadership, and every operation.
Then what the runtime role must not do: DDL of any kind, and migrations.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from support import wait_until
from ulid import ULID

import venturi
from venturi.beat import Beat
from venturi.context import Context
from venturi.errors import Fail, MigrationError, Retry
from venturi.refs import JobRef
from venturi.types import Status
from venturi.worker import Worker

DOCUMENT = Path(__file__).parents[2] / "docs" / "operations" / "least-privilege.md"
_BLOCK = re.compile(r"```sql\n-- run as: (?P<role>[^\n]+)\n(?P<sql>.*?)```", re.DOTALL)


def documented_sql(role: str) -> str:
    """The document's SQL block(s) run as ``role``, in order."""
    blocks = [m["sql"] for m in _BLOCK.finditer(DOCUMENT.read_text()) if m["role"] == role]
    assert blocks, f"{DOCUMENT} has no block to run as {role}"
    return "\n".join(blocks)


@dataclass(frozen=True)
class Roles:
    owner: str
    runtime: str
    prefix: str
    owner_url: str
    runtime_url: str
    admin_url: str

    def run_documented(self, role: str, url: str) -> None:
        sql = (
            documented_sql(role)
            .replace("venturi_owner", self.owner)
            .replace("venturi_runtime", self.runtime)
            .replace("venturi_", f"{self.prefix}_")
        )
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in filter(str.strip, sql.split(";")):
                conn.execute(statement)


@pytest.fixture
def roles(database_url: str, invariants: Any) -> Iterator[Roles]:
    suffix = secrets.token_hex(4)
    owner, runtime = f"lp_owner_{suffix}", f"lp_runtime_{suffix}"
    made = Roles(
        owner=owner,
        runtime=runtime,
        prefix=f"t_lp_{suffix}",
        owner_url=make_conninfo(database_url, user=owner),
        runtime_url=make_conninfo(database_url, user=runtime),
        admin_url=database_url,
    )
    made.run_documented("superuser", database_url)
    try:
        migrator = venturi.App(made.owner_url, prefix=made.prefix, set_as_current=False)
        try:
            assert [m.version for m in migrator.migrate()] == list(range(1, 15))
        finally:
            migrator.close()
        made.run_documented("owner", made.owner_url)
        yield made
        invariants.check_prefix(made.prefix)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            # Sessions of the roles (a worker's listener, a leader) must end first.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN (%s, %s)",
                (owner, runtime),
            )
        made.run_documented("superuser, to remove", database_url)


def table_owner(roles: Roles, table: str) -> str:
    with psycopg.connect(roles.admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = %s", (f"{roles.prefix}_{table}",)
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_the_runtime_role_enqueues_drains_leads_beat_and_runs_every_operation(
    roles: Roles,
) -> None:
    assert table_owner(roles, "jobs") == roles.owner
    runtime = venturi.App(roles.runtime_url, prefix=roles.prefix, set_as_current=False)
    holding = threading.Event()
    release = threading.Event()

    @runtime.task(kind="lp.work")
    def work(n: int) -> int:
        return n

    @runtime.task(kind="lp.unique", dedup=lambda key: key)
    def unique(key: str) -> str:
        return key

    @runtime.task(kind="lp.flaky")
    def flaky(ctx: Context) -> str:
        if ctx.run_count == 1:
            raise Retry("not yet", delay=0)
        return "done"

    @runtime.task(kind="lp.durable")
    def durable(ctx: Context) -> int:
        # Steps and events are rows of their own tables (V12): their grants and sequence.
        value = int(ctx.step("s", lambda: 1))
        return value + int(ctx.wait_for("go", timeout=60))

    @runtime.task(kind="lp.doomed")
    def doomed() -> None:
        raise Fail("doomed")

    @runtime.task(kind="lp.lingering")
    def lingering() -> None:
        holding.set()
        release.wait(10)

    @runtime.task(kind="lp.tick", schedule="* * * * *")
    def tick() -> None:
        """Scheduled every minute; only beat enqueues it."""

    try:
        # Enqueue: plain, bulk, deduplicated (advisory lock + row lock), in a transaction.
        refs = work.delay_many([{"n": n} for n in range(10)])
        first = unique.delay("k")
        assert unique.delay("k") == JobRef(first.id, merged=True)
        with psycopg.connect(roles.runtime_url) as conn:
            transactional = work.apply_async(args=(7,), connection=conn)
        retried = flaky.delay()
        stepped = durable.delay()
        runtime.send(stepped.id, "go", 2)
        dead = doomed.delay()
        future = work.apply_async(args=(8,), countdown=3600)
        # A claim whose worker vanished: the runtime worker's sweep must recover it.
        stale = str(ULID())
        with psycopg.connect(roles.admin_url, autocommit=True) as conn:
            conn.execute(
                f"""
                INSERT INTO {roles.prefix}_jobs
                    (id, kind, payload, status, created_at, visible_at, claimed_by,
                     claim_expires_at, run_count)
                VALUES (%s, 'lp.work', '{{"n": 9}}', 'claimed', now(), now(), 'gone:1',
                        now() - interval '1 minute', 1)
                """,
                (stale,),
            )

        worker = Worker(runtime, concurrency=4, poll_interval=0.5, recovery_interval=1.0)
        worker.start()
        try:
            done = [
                *(r.id for r in refs),
                first.id,
                transactional.id,
                retried.id,
                stale,
                stepped.id,
            ]

            def status(job_id: str) -> Status:
                return runtime.job(job_id).job.status

            wait_until(lambda: all(status(i) is Status.COMPLETED for i in done))
            wait_until(lambda: status(dead.id) is Status.DEAD)
            held = lingering.delay()
            wait_until(holding.is_set)
        finally:
            worker.stop(grace=0)  # releases the lingering job (ADR 21)
            release.set()
        assert [e.outcome.value for e in runtime.job(held.id).journal] == ["released"]
        assert [e.outcome.value for e in runtime.job(stale).journal] == [
            "stale-recovered",
            "completed",
        ]
        assert [s.name for s in runtime.job(stepped.id).steps] == ["s"]
        assert stepped.result(timeout=5) == 3
        assert [e.outcome.value for e in runtime.job(retried.id).journal] == [
            "retried",
            "completed",
        ]

        # Beat: the leadership is an advisory lock, which needs no grant.
        leader, standby = Beat(runtime), Beat(runtime)
        try:
            leader.step()
            standby.step()
            assert (leader.is_leader, standby.is_leader) == (True, False)
            assert [j.kind for j in runtime.jobs(kind="lp.tick").jobs] == ["lp.tick"]
        finally:
            leader.stop()
            standby.stop()

        # The operations.
        assert runtime.jobs(status="completed", limit=1000).jobs
        assert runtime.retry(dead.id).status is Status.PENDING
        assert runtime.cancel(future.id).status is Status.DEAD
        assert {k.kind for k in runtime.stats().kinds} >= {"lp.work", "lp.flaky", "lp.doomed"}
        assert runtime.cleanup(older_than=timedelta(0)) >= len(done)
        assert runtime.job(dead.id).job.status is Status.PENDING
    finally:
        runtime.close()


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE {prefix}_evil (id int)",
        "CREATE TABLE IF NOT EXISTS {prefix}_migrations (version int)",
        "DROP TABLE {prefix}_journal",
        "DROP TABLE {prefix}_jobs CASCADE",
        "ALTER TABLE {prefix}_jobs ADD COLUMN evil text",
        "CREATE INDEX {prefix}_evil ON {prefix}_jobs (kind)",
        "TRUNCATE {prefix}_journal",
        "SELECT * FROM {prefix}_migrations",
        "CREATE SCHEMA {prefix}_evil",
        "CREATE FUNCTION {prefix}_evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    ],
)
def test_the_runtime_role_is_refused_every_schema_change(roles: Roles, statement: str) -> None:
    with (
        psycopg.connect(roles.runtime_url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement.format(prefix=roles.prefix))
    assert table_owner(roles, "jobs") == roles.owner


def test_migrate_as_the_runtime_role_is_refused_with_a_migration_error(roles: Roles) -> None:
    runtime = venturi.App(roles.runtime_url, prefix=roles.prefix, set_as_current=False)
    try:
        with pytest.raises(MigrationError, match="privilege"):
            runtime.migrate()
    finally:
        runtime.close()
    assert table_owner(roles, "jobs") == roles.owner


def test_the_runtime_role_writes_journal_entries_without_usage_on_the_identity_sequence(
    roles: Roles,
) -> None:
    with psycopg.connect(roles.owner_url, autocommit=True) as conn:
        conn.execute(f"REVOKE USAGE ON SEQUENCE {roles.prefix}_journal_id_seq FROM {roles.runtime}")
    runtime = venturi.App(roles.runtime_url, prefix=roles.prefix, set_as_current=False)

    @runtime.task(kind="lp.plain")
    def plain() -> str:
        return "ok"

    try:
        ref = plain.delay()
        assert Worker(runtime, concurrency=1).run_once() == 1
        assert [e.outcome.value for e in runtime.job(ref.id).journal] == ["completed"]
    finally:
        runtime.close()


def test_the_owner_role_can_migrate_again_and_the_history_is_unchanged(roles: Roles) -> None:
    owner = venturi.App(roles.owner_url, prefix=roles.prefix, set_as_current=False)
    try:
        assert owner.migrate() == []
    finally:
        owner.close()


def test_the_runtime_roles_worker_registers_heartbeats_and_deregisters(roles: Roles) -> None:
    """The worker registry (ADR 0119) is one of the tables the document grants."""
    runtime = venturi.App(roles.runtime_url, prefix=roles.prefix, set_as_current=False)

    @runtime.task(kind="lp.registered", lease=timedelta(seconds=1))
    def registered() -> None:
        """Never enqueued: the worker only has to serve the kind."""

    orphan = str(ULID())
    with psycopg.connect(roles.admin_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {roles.prefix}_jobs (id, kind, payload, status, created_at, visible_at)"
            " VALUES (%s, 'lp.orphan', '{}', 'pending', now(), now())",
            (orphan,),
        )
    worker = Worker(runtime, concurrency=1, kinds=["lp.registered"], poll_interval=0.5)
    try:
        worker.start()
        try:
            (entry,) = wait_until(runtime.workers)
            assert entry.kinds == ("lp.registered",)
            beat = entry.heartbeat_at
            wait_until(lambda: runtime.workers()[0].heartbeat_at > beat)
            assert runtime.unserved_kinds() == ["lp.orphan"]
        finally:
            worker.stop(grace=0)
        assert runtime.workers() == []
        runtime.cancel(orphan)
    finally:
        runtime.close()
