"""Worker processes on the network paths of a fleet of hosts (ADR 0123).

Two ``venturi worker`` processes drain through a real PgBouncer in
transaction mode, each job exactly once. And a silent partition: one worker
reaches the database through a proxy that stops forwarding without closing
anything (TCP keeps answering), the other directly. The cut-off worker
notices within its reply bound, its jobs are recovered by the other one,
whatever it tries to record late is fenced out, and once the path is back
it claims and completes jobs again. Every run is accounted for in the
journal (``fault_tools.unaccounted_runs``). Both tests take ``app`` for
the emptied tables it leaves them.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chaos_app
import pytest
from contract.pgbouncer import PgBouncer, require_pgbouncer
from fault_tools import WorkerFleet, unaccounted_runs, wait_for_sessions_to_end
from support import TcpProxy, count, wait_until

import venturi

#: Hang guards, not speed assertions.
DRAIN_TIMEOUT = 120.0
NOTICE_TIMEOUT = 30.0
REJOIN_TIMEOUT = 90.0


@pytest.fixture
def work(database_url: str, prefix: str) -> Iterator[Any]:
    queue, task, _ = chaos_app.build_app(database_url, prefix)
    yield task
    queue.close()


def state(db: Any) -> str:
    """The queue and the server sessions of the test's workers, for a failure message."""
    statuses = db.all("SELECT status, count(*) FROM {{prefix}}_jobs GROUP BY status")
    sessions = db.all(
        "SELECT application_name, state, wait_event, left(query, 40) AS query "
        "FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"venturi-%-{db.prefix}",),
    )
    return f"jobs: {statuses}\nsessions: {sessions}\n"


@pytest.fixture
def fleets() -> Iterator[list[WorkerFleet]]:
    made: list[WorkerFleet] = []
    yield made
    for fleet in made:
        fleet.kill_all()


@pytest.mark.slow
def test_two_workers_through_pgbouncer_drain_500_jobs_exactly_once(
    database_url: str,
    prefix: str,
    app: venturi.App,
    db: Any,
    work: Any,
    tmp_path: Path,
    fleets: list[WorkerFleet],
) -> None:
    require_pgbouncer()
    bouncer = PgBouncer(database_url, pool_size=4).start()
    try:
        fleet = WorkerFleet(
            bouncer.url,
            prefix,
            tmp_path,
            application_name=f"venturi-pgb-{prefix}",
            env={"VENTURI_DIRECT_DATABASE_URL": database_url},
        )
        fleets.append(fleet)
        work.delay_many([{"n": n} for n in range(500)])
        fleet.start(2)
        try:
            wait_until(lambda: count(db, "status = 'completed'") == 500, timeout=DRAIN_TIMEOUT)
        except AssertionError:
            raise AssertionError(fleet.logs()) from None
        assert fleet.stop() == [0, 0], fleet.logs()
    finally:
        bouncer.close()
    wait_for_sessions_to_end(db, fleet.application_name)

    assert unaccounted_runs(db) == []
    assert count(db, "run_count <> 1") == 0
    assert "prepared statement" not in fleet.logs() + bouncer.log()


@pytest.mark.slow
def test_a_worker_cut_off_by_a_silent_partition_is_recovered_from_fenced_and_rejoins(
    database_url: str,
    prefix: str,
    app: venturi.App,
    db: Any,
    work: Any,
    tmp_path: Path,
    fleets: list[WorkerFleet],
) -> None:
    proxy = TcpProxy.in_front_of(database_url)
    # A request cut in the middle can leave the server running a statement whose
    # Sync never comes, its row locks held: the server's own timeout gives them
    # back, as the README recommends for any deployment (ADR 0123).
    proxied_url = proxy.url(database_url, options="-c idle_in_transaction_session_timeout=3000")
    (tmp_path / "cut").mkdir()
    (tmp_path / "direct").mkdir()
    cut_off = WorkerFleet(
        proxied_url,
        prefix,
        tmp_path / "cut",
        application_name=f"venturi-cut-{prefix}",
        app="partition_app:app",
    )
    direct = WorkerFleet(
        database_url,
        prefix,
        tmp_path / "direct",
        application_name=f"venturi-direct-{prefix}",
        app="partition_app:app",
    )
    fleets += [cut_off, direct]
    cut_off.start(1)
    direct.start(1)
    cut_off.wait_started()
    direct.wait_started()
    (cut_off_process,) = cut_off.slots
    cut_off_id = f"%:{cut_off_process.pid}"
    jobs = 2000
    work.delay_many([{"n": n} for n in range(jobs)])
    wait_until(lambda: count(db, f"claimed_by LIKE '{cut_off_id}'") > 0, timeout=NOTICE_TIMEOUT)

    proxy.blackhole()
    try:
        wait_until(
            lambda: "no reply from the database within" in cut_off.log(cut_off_process),
            timeout=NOTICE_TIMEOUT,
        )
        wait_until(lambda: count(db, "run_count > 1") > 0, timeout=NOTICE_TIMEOUT)
        wait_until(lambda: count(db, "status = 'completed'") == jobs, timeout=DRAIN_TIMEOUT)
    except AssertionError:
        raise AssertionError(state(db) + cut_off.logs() + direct.logs()) from None
    assert cut_off_process.poll() is None, cut_off.logs()

    # Only the cut-off worker is left: the next jobs complete only if it rejoined.
    (direct_process,) = direct.slots
    direct_process.send_signal(signal.SIGTERM)
    assert direct_process.wait(20) == 0, direct.logs()
    proxy.restore()
    work.delay_many([{"n": n} for n in range(jobs, jobs + 50)])
    try:
        wait_until(lambda: count(db, "status = 'completed'") == jobs + 50, timeout=REJOIN_TIMEOUT)
    except AssertionError:
        raise AssertionError(state(db) + cut_off.logs()) from None
    assert cut_off.stop() == [0], cut_off.logs()
    proxy.stop()
    wait_for_sessions_to_end(db, cut_off.application_name)
    wait_for_sessions_to_end(db, direct.application_name)

    assert unaccounted_runs(db) == []
