"""The database goes away under running workers and callers (SPEC section 4, ADR 113).

- Every server session of the test's ``venturi worker`` processes (found by
  their ``PGAPPNAME``) is terminated with ``pg_terminate_backend``, again and
  again, while they drain a backlog: the workers log the outage, back off,
  reconnect and finish; no job is lost or completed twice.
- ``.delay()`` through a TCP proxy that the test stops: a typed
  ``BackendUnavailable`` within a bound (never a hang), nothing written, and
  enqueueing works again once the proxy is back.
- The server restarts (on a private cluster, never the shared one) while
  workers drain a backlog: they reconnect and finish every job exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import chaos_app
import psycopg
import pytest
from fault_tools import (
    InvariantChecker,
    WorkerFleet,
    count_on,
    table_checksums,
    unaccounted_runs,
    wait_for_sessions_to_end,
)
from private_server import PrivateServer
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from support import Database, TcpProxy, count, wait_until

import venturi
from venturi.errors import BackendUnavailable

logger = logging.getLogger(__name__)

WORKERS = 2
TERMINATE_EVERY = 0.5
#: Full restarts of the private server during one drain.
RESTARTS = 3
#: Hang guards, not speed assertions.
DRAIN_TIMEOUT = 90.0
RECOVERY_TIMEOUT = 30.0
#: The adapter waits at most its 5 s connect timeout for a connection (plus one
#: direct attempt to say why): a call during an outage must end well within this.
OUTAGE_CALL_BOUND = 15.0


def terminate_sessions(db: Any, application_name: str) -> int:
    """Terminate every server session of that application; returns how many."""
    return int(
        db.scalar(
            """
            SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
            FROM pg_stat_activity WHERE application_name = %s
            """,
            (application_name,),
        )
    )


@pytest.mark.slow
def test_workers_whose_sessions_are_terminated_repeatedly_reconnect_and_complete_every_job_once(
    db: Any, fleet: WorkerFleet, database_url: str, prefix: str
) -> None:
    jobs = 2000
    queue, work, _ = chaos_app.build_app(database_url, prefix)
    try:
        work.delay_many([{"n": n} for n in range(jobs)])
    finally:
        queue.close()

    fleet.start(WORKERS)
    fleet.wait_started()
    wait_until(lambda: count(db, "status = 'completed'") > 0, timeout=30)
    rounds = terminated = 0
    pace = threading.Event()
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while count(db, "run_count = 0") > 0:
        assert time.monotonic() < deadline, fleet.logs()
        terminated += terminate_sessions(db, fleet.application_name)
        rounds += 1
        pace.wait(TERMINATE_EVERY)
    try:
        wait_until(lambda: count(db, "status = 'completed'") == jobs, timeout=RECOVERY_TIMEOUT)
    except AssertionError:
        raise AssertionError(fleet.logs()) from None

    assert fleet.all_running(), fleet.logs()
    for process in fleet.slots:
        log = fleet.log(process)
        assert "database unreachable" in log, log
        assert "database reachable again" in log, log
    assert fleet.stop() == [0] * WORKERS, fleet.logs()
    wait_for_sessions_to_end(db, fleet.application_name)

    assert rounds >= 3, "the backlog drained before the outages began"
    assert terminated > 0
    assert count(db, "status <> 'completed'") == 0
    # A claim whose answer died with its session is recovered like a killed
    # worker's; an outcome whose answer died is retried and fenced: either way
    # each run ends in exactly one entry, and exactly one run completed.
    assert unaccounted_runs(db) == []
    logger.info("%d rounds terminated %d sessions", rounds, terminated)


def test_delay_after_the_server_ended_every_pooled_session_succeeds_on_a_fresh_connection(
    app: venturi.App, db: Any, database_url: str, prefix: str
) -> None:
    application_name = f"venturi-stale-{prefix}"
    pooled = venturi.App(
        make_conninfo(database_url, application_name=application_name),
        prefix=prefix,
        set_as_current=False,
    )

    @pooled.task(kind="stale.send")
    def send(n: int) -> int:
        return n

    try:
        send.delay(0)  # the pool now holds an open session
        assert terminate_sessions(db, application_name) >= 1
        wait_for_sessions_to_end(db, application_name)
        ref = send.delay(1)
    finally:
        pooled.close()
    assert db.one("SELECT payload FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == {
        "payload": {"n": 1}
    }


def completed_beyond(url: str, prefix: str, known: int) -> int:
    """The completed count once it exceeds ``known``, else 0 (a ``wait_until`` predicate)."""
    completed = count_on(url, prefix, "status = 'completed'")
    return completed if completed > known else 0


@pytest.mark.slow
def test_workers_survive_full_server_restarts_and_complete_every_job_once(
    private_server: PrivateServer, tmp_path: Path
) -> None:
    url = private_server.url
    prefix = "restart"
    jobs = 1500
    queue, work, _ = chaos_app.build_app(url, prefix)
    try:
        queue.migrate()
        work.delay_many([{"n": n} for n in range(jobs)])
    finally:
        queue.close()
    fleet = WorkerFleet(url, prefix, tmp_path, application_name="venturi-restart")
    try:
        fleet.start(WORKERS)
        fleet.wait_started()
        restarts = 0
        completed = 0
        while restarts < RESTARTS and count_on(url, prefix, "run_count = 0") > 0:
            # Workers made progress since the last restart, so they had reconnected.
            completed = wait_until(partial(completed_beyond, url, prefix, completed), timeout=30)
            # Every session ends at once, and connections are refused until the server is up.
            private_server.restart()
            restarts += 1
        try:
            wait_until(
                lambda: count_on(url, prefix, "status = 'completed'") == jobs,
                timeout=DRAIN_TIMEOUT,
            )
        except AssertionError:
            raise AssertionError(fleet.logs()) from None
        assert fleet.all_running(), fleet.logs()
        for process in fleet.slots:
            log = fleet.log(process)
            assert "database unreachable" in log, log
            assert "database reachable again" in log, log
        assert fleet.stop() == [0] * WORKERS, fleet.logs()
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            db = Database(conn, prefix)
            wait_for_sessions_to_end(db, fleet.application_name)
            assert restarts >= 2, "the backlog drained before the second restart"
            assert unaccounted_runs(db) == []
        InvariantChecker(url, [prefix]).check()
    finally:
        fleet.kill_all()


def raised_within(call: Callable[[], object], bound: float) -> BaseException | None:
    """Run ``call`` in a thread; the exception it raised, or None if it returned.

    Fails if the call has not ended after ``bound`` seconds: a hang guard for a
    caller that must never block forever, not a speed assertion.
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name="bounded-call", daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"the call was still blocked after {bound}s"
    return outcome[0]


@pytest.mark.slow
def test_delay_during_an_outage_raises_backend_unavailable_within_a_bound_and_works_again_after(
    app: venturi.App, db: Any, database_url: str, prefix: str
) -> None:
    proxy = TcpProxy.in_front_of(database_url)
    proxied = venturi.App(
        proxy.url(database_url),
        prefix=prefix,
        set_as_current=False,
    )

    @proxied.task(kind="outage.send")
    def send(n: int) -> int:
        return n

    try:
        first = send.delay(0)
        before = table_checksums(db)
        proxy.stop()

        # The pooled connection is broken now, and new ones are refused: both ways
        # of meeting the outage end in the typed error.
        for call in (
            lambda: send.delay(1),
            lambda: send.apply_async(kwargs={"n": 2}, countdown=5),
            lambda: send.delay_many([{"n": 3}, {"n": 4}]),
        ):
            started = time.monotonic()
            error = raised_within(call, OUTAGE_CALL_BOUND)
            logger.info("refused after %.1fs: %r", time.monotonic() - started, error)
            assert isinstance(error, BackendUnavailable), repr(error)
            assert "database unavailable" in str(error)
        assert table_checksums(db) == before

        proxy.start()

        def delayed() -> venturi.JobRef | None:
            try:
                return send.delay(5)
            except BackendUnavailable:
                return None

        restored = time.monotonic()
        after = wait_until(delayed, timeout=RECOVERY_TIMEOUT)
        logger.info(
            "enqueueing worked again %.1fs after the proxy was back", time.monotonic() - restored
        )
    finally:
        proxied.close()
        proxy.stop()
    rows = {row["id"]: row["payload"] for row in db.jobs()}
    assert rows == {first.id: {"n": 0}, after.id: {"n": 5}}
