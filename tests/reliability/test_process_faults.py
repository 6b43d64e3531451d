"""Worker processes that die at any instant lose no job (SPEC section 4, ADR 19).

Three real ``venturi worker`` processes (``chaos_app.py``) drain a backlog
while they are killed: by the test (SIGKILL at random, every second), or by a
handler that ends its own process with ``os._exit(1)``. Every dead process is
replaced at once. At the end every job is ``completed`` exactly once, and the
journal accounts for every run: each run that did not record an outcome was
followed by a ``stale-recovered`` entry of that run (fault_tools.unaccounted_runs).

Sizes: the SIGKILL test drains the issue's 5,000 short jobs (10 ms each), which
takes 12-21 s and 14-16 kills on this 2-core machine. The ``os._exit`` test
uses 1,000, five of which end their process: there the time goes to restarts
and lease expiry, not to the job count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import chaos_app
import pytest
from fault_tools import WorkerFleet, unaccounted_runs, wait_for_sessions_to_end
from support import count, wait_until

logger = logging.getLogger(__name__)

WORKERS = 3
KILL_EVERY = 1.0
#: Hang guards for a whole drain, not speed assertions.
DRAIN_TIMEOUT = 90.0
RECOVERY_TIMEOUT = 30.0


@pytest.fixture
def tasks(database_url: str, prefix: str) -> Iterator[tuple[Any, Any]]:
    queue, work, crash = chaos_app.build_app(database_url, prefix)
    yield work, crash
    queue.close()


def stop_fleet(db: Any, fleet: WorkerFleet) -> None:
    """SIGTERM the survivors (a clean exit), then wait until every session of every
    process, killed ones included, has ended: the tables are final from then on."""
    assert fleet.stop() == [0] * WORKERS, fleet.logs()
    wait_for_sessions_to_end(db, fleet.application_name)


@pytest.mark.slow
def test_workers_sigkilled_at_random_every_second_lose_no_job_and_every_lost_run_is_recovered(
    db: Any, fleet: WorkerFleet, tasks: tuple[Any, Any]
) -> None:
    jobs = 5000
    work, _ = tasks
    work.delay_many([{"n": n} for n in range(jobs)])

    fleet.start(WORKERS)
    # Kill while the backlog lasts: every second one worker, at whatever instant of
    # its work (claiming, running, recording, sweeping) it happens to be.
    kills, seed = fleet.kill_at_random_while(
        lambda: count(db, "run_count = 0") > 0, every=KILL_EVERY, timeout=DRAIN_TIMEOUT
    )
    try:
        wait_until(lambda: count(db, "status = 'completed'") == jobs, timeout=RECOVERY_TIMEOUT)
    except AssertionError:
        raise AssertionError(fleet.logs()) from None
    stop_fleet(db, fleet)

    assert fleet.exits == [], "a worker died without being killed"
    assert kills >= 3, f"the backlog drained before the chaos began (seed {seed})"
    assert count(db, "status <> 'completed'") == 0
    assert unaccounted_runs(db) == [], f"seed {seed}"
    recovered = count(db, "run_count > 1")
    assert recovered > 0, f"{kills} kills interrupted no run (seed {seed})"
    logger.info("%d kills, %d job(s) recovered and completed", kills, recovered)


@pytest.mark.slow
def test_a_handler_that_ends_its_own_process_mid_run_loses_no_job(
    db: Any, fleet: WorkerFleet, tasks: tuple[Any, Any]
) -> None:
    jobs = 1000
    _, crash = tasks
    crash.delay_many([{"n": n} for n in range(jobs)])
    crashing = {
        row["id"]
        for row in db.all(
            "SELECT id FROM {{prefix}}_jobs WHERE mod((payload->>'n')::int, %s) = 0",
            (chaos_app.CRASH_EVERY,),
        )
    }

    fleet.start(WORKERS)
    began = time.monotonic()
    pace = threading.Event()
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while count(db, "status = 'completed'") < jobs:
        assert time.monotonic() < deadline, fleet.logs()
        if fleet.restart_exited():
            logger.info("restarted a worker at %.1fs", time.monotonic() - began)
        pace.wait(0.1)
    logger.info("all completed at %.1fs", time.monotonic() - began)
    stop_fleet(db, fleet)

    # Every process that ended by itself did so through a handler's os._exit(1).
    assert fleet.exits, "no handler ended its process"
    assert set(fleet.exits) == {1}, fleet.exits
    assert count(db, "status <> 'completed'") == 0
    assert unaccounted_runs(db) == []
    # A crashing job's first run never records an outcome: whether it ended its
    # process or died with another job's, it was recovered and ran again.
    for job_id in crashing:
        journal = [(e["run_no"], e["outcome"]) for e in db.journal(job_id)]
        assert journal[0] == (1, "stale-recovered"), journal
