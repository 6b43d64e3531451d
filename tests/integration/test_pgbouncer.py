"""venturi behind a real PgBouncer in transaction pooling mode (ADR 0123).

Every statement on pooled connections must survive being spread over server
sessions (the pgbouncer here rotates them, ``server_round_robin``): nothing
prepared, nothing ``SET``, no session lock. With a direct URL, LISTEN and
leadership use it; without one, workers poll, leadership holds a transaction
open, and ``migrate`` is refused. The "postgres through pgbouncer" case of the
conformance suite runs every Backend contract the same way.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from contract.pgbouncer import PgBouncer, require_pgbouncer
from support import duplicate_ticks, wait_until
from ulid import ULID

import venturi
from venturi.beat import Beat
from venturi.errors import BackendUnavailable, ConfigurationError
from venturi.postgres import PostgresBackend
from venturi.types import NewJob
from venturi.worker import Worker

#: More executions of each statement than psycopg's prepare threshold (5).
REPEATS = 30
LEASE = timedelta(minutes=1)


@pytest.fixture(scope="module")
def bouncer(database_url: str) -> Iterator[PgBouncer]:
    """A pgbouncer of this module's own, with two server sessions to rotate over."""
    require_pgbouncer()
    started = PgBouncer(database_url, pool_size=2).start()
    yield started
    started.close()


@pytest.fixture
def backends(prefix: str, app: venturi.App) -> Iterator[Callable[..., PostgresBackend]]:
    built: list[PostgresBackend] = []

    def build(url: str, **options: Any) -> PostgresBackend:
        backend = PostgresBackend(url, prefix=prefix, **options)
        built.append(backend)
        return backend

    yield build
    for backend in built:
        backend.close()


def new_job(n: int) -> NewJob:
    return NewJob(str(ULID()), "pgb.kind", f'{{"n": {n}}}')


def cycle(backend: PostgresBackend, worker_id: str) -> int:
    """Enqueue, claim, renew and time-until-visible: the worker's statements; how many
    jobs the claim took. That may be none even with a job pending: a claim skips the
    rows concurrent claims lock, and does not see a job committed after it began."""
    backend.enqueue([new_job(0)])
    claimed = backend.claim(kinds=["pgb.kind"], limit=1, worker_id=worker_id, lease=LEASE)
    backend.renew_leases([job.claim for job in claimed], LEASE)
    backend.time_until_visible(["pgb.kind"])
    return len(claimed)


def test_statements_repeated_past_the_prepare_threshold_run_through_pgbouncer(
    bouncer: PgBouncer, backends: Callable[..., PostgresBackend], database_url: str, db: Any
) -> None:
    pooled = backends(bouncer.url, direct_url=database_url)
    errors: list[BaseException] = []
    claims: list[int] = []

    def run(worker_id: str) -> None:
        try:
            for _ in range(REPEATS):
                claims.append(cycle(pooled, worker_id))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"pgb-host:{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert len(claims) == 3 * REPEATS
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs") == 3 * REPEATS
    # Every job a claim returned is claimed in the table, once, and the others still pending.
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'claimed'") == sum(claims)
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'pending'") == (
        3 * REPEATS - sum(claims)
    )
    assert "prepared statement" not in bouncer.log()


def test_without_transaction_pooling_the_same_statements_break_behind_pgbouncer(
    bouncer: PgBouncer, backends: Callable[..., PostgresBackend]
) -> None:
    """The control: prepared statements (psycopg's default) do not survive the rotation,
    so the test above would catch a statement that slipped back into being prepared."""
    naive = backends(bouncer.url, transaction_pooling=False)
    failures: list[str] = []

    def run(worker_id: str) -> None:
        for _ in range(REPEATS):
            try:
                cycle(naive, worker_id)
            except (psycopg.Error, BackendUnavailable) as exc:
                failures.append(str(exc))

    threads = [threading.Thread(target=run, args=(f"naive-host:{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert any("prepared statement" in failure for failure in failures), failures[:3]


def test_without_a_direct_url_a_worker_polls_and_still_runs_new_jobs(
    bouncer: PgBouncer, prefix: str, app: venturi.App, db: Any
) -> None:
    pooled_app = venturi.App(
        bouncer.url, prefix=prefix, transaction_pooling=True, set_as_current=False
    )
    ran = threading.Event()
    pooled_app.task(kind="pgb.poll")(ran.set)
    worker = Worker(pooled_app, concurrency=1, poll_interval=0.5)
    worker.start()
    try:
        pooled_app.tasks()["pgb.poll"].delay()
        assert ran.wait(timeout=10)
        wait_until(lambda: completed(db) == 1)
        listening = db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%%' AND query LIKE %s",
            (f"%{prefix}%",),
        )
    finally:
        worker.stop(grace=5)
        pooled_app.close()
    assert listening == 0


def test_without_a_direct_url_migrate_is_refused_with_what_to_pass(
    bouncer: PgBouncer, backends: Callable[..., PostgresBackend]
) -> None:
    with pytest.raises(ConfigurationError, match="direct_url"):
        backends(bouncer.url, transaction_pooling=True).migrate()


def test_without_a_direct_url_leadership_is_a_transaction_held_open_behind_pgbouncer(
    bouncer: PgBouncer, backends: Callable[..., PostgresBackend]
) -> None:
    first = backends(bouncer.url, transaction_pooling=True)
    second = backends(bouncer.url, transaction_pooling=True)

    held = first.try_lead("pgb-role")
    assert held is not None
    assert second.try_lead("pgb-role") is None
    assert held.is_held()
    held.release()
    taken = second.try_lead("pgb-role")
    assert taken is not None
    taken.release()


def completed(db: Any) -> int:
    return int(db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'completed'"))


@pytest.mark.slow
@pytest.mark.parametrize("with_direct_url", [True, False], ids=["direct-url", "no-direct-url"])
def test_two_beats_through_pgbouncer_tick_once(
    bouncer: PgBouncer,
    database_url: str,
    prefix: str,
    app: venturi.App,
    db: Any,
    with_direct_url: bool,
) -> None:
    def through_bouncer() -> venturi.App:
        made = venturi.App(
            bouncer.url,
            prefix=prefix,
            direct_url=database_url if with_direct_url else None,
            transaction_pooling=True,
            set_as_current=False,
        )
        made.periodic("* * * * * *", made.task(kind="pgb.tick")(lambda: None), name="every-second")
        return made

    apps = [through_bouncer() for _ in range(3)]
    beats = [Beat(apps[n], interval=0.05, standby_interval=0.1) for n in range(2)]
    worker = Worker(apps[2], concurrency=2, poll_interval=0.5)
    for beat in beats:
        beat.start()
    worker.start()
    try:
        wait_until(lambda: [beat for beat in beats if beat.is_leader] or None)
        wait_until(lambda: completed(db) >= 3, timeout=20)
        assert len([beat for beat in beats if beat.is_leader]) == 1
    finally:
        for beat in beats:
            beat.stop(grace=5)
        worker.stop(grace=5)
        for made in apps:
            made.close()
    assert duplicate_ticks(db) == []
    assert "prepared statement" not in bouncer.log()


def test_without_a_direct_url_the_leader_is_read_through_pgbouncer(
    bouncer: PgBouncer, backends: Callable[..., PostgresBackend], database_url: str, prefix: str
) -> None:
    """The held transaction's server session carries the holder's name (PgBouncer sets
    the client's application_name on it), and "since" is the transaction's start, not
    that older server session's (ADR 0131)."""
    reader = backends(bouncer.url, transaction_pooling=True)
    holder = backends(bouncer.url, transaction_pooling=True)
    for _ in range(REPEATS):
        reader.now()  # server sessions opened now: older than the leadership
    before = reader.now()
    held = holder.try_lead("pgb-role")
    assert held is not None
    try:
        found = reader.leader("pgb-role")
        assert found is not None
        assert found.holder == f"{socket.gethostname()}:{os.getpid()}"
        assert found.since is not None and found.since >= before
        assert held.is_held()
        assert reader.leader("pgb-role") == found
        direct = backends(database_url).leader("pgb-role")
        assert direct == found
    finally:
        held.release()
    assert reader.leader("pgb-role") is None
