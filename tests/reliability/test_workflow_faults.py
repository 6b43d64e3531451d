"""A chord survives worker processes SIGKILLed at any instant (SPEC 5.4, ADR 0125).

Three real ``venturi worker`` processes (``workflow_app.py``) run a
1,000-member group with a chord callback while the test SIGKILLs one of them
at random every second and starts a fresh one. A kill can land anywhere: in a
member, in the committer's finish that hands results on, in the callback. At
the end every member completed exactly once (one ``completed`` entry; the
journal accounts for every interrupted run), the callback became a job once,
completed once, with every member's result in order, and the invariants of
the reliability suite hold.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import workflow_app
from fault_tools import WorkerFleet, unaccounted_runs, wait_for_sessions_to_end
from support import count, wait_until

from venturi import chord

logger = logging.getLogger(__name__)

WORKERS = 3
MEMBERS = 1000
KILL_EVERY = 1.0
#: Hang guards, not speed assertions.
DRAIN_TIMEOUT = 120.0
RECOVERY_TIMEOUT = 60.0


@pytest.fixture
def tasks(database_url: str, prefix: str, db: Any) -> Iterator[tuple[Any, Any]]:
    db.execute(
        "CREATE TABLE {{prefix}}_callback_runs"
        " (job_id text, run_count int, members int, total bigint)"
    )
    queue, member, collect = workflow_app.build_app(database_url, prefix)
    yield member, collect
    queue.close()
    db.execute("DROP TABLE {{prefix}}_callback_runs")


@pytest.fixture
def flow_fleet(db: Any, database_url: str, prefix: str, tmp_path: Any) -> Iterator[WorkerFleet]:
    started = WorkerFleet(
        database_url,
        prefix,
        tmp_path,
        application_name=f"venturi-flow-{prefix}",
        app="workflow_app:app",
    )
    yield started
    started.kill_all()
    wait_for_sessions_to_end(db, started.application_name)


@pytest.mark.slow
def test_a_chord_of_1000_members_completes_each_once_and_its_callback_once_under_sigkill(
    db: Any, flow_fleet: WorkerFleet, tasks: tuple[Any, Any]
) -> None:
    member, collect = tasks
    ref = chord([member.s(n) for n in range(MEMBERS)], collect.s()).delay()
    callback = ref.outputs[0].id

    flow_fleet.start(WORKERS)
    # Kill while the callback has not completed: members, hand-ons and the callback
    # itself are all exposed.
    kills, seed = flow_fleet.kill_at_random_while(
        lambda: count(db, "kind = 'flow.collect' AND status = 'completed'") == 0,
        every=KILL_EVERY,
        timeout=DRAIN_TIMEOUT,
    )
    try:
        wait_until(lambda: count(db, "status = 'completed'") == MEMBERS + 1, RECOVERY_TIMEOUT)
    except AssertionError:
        raise AssertionError(flow_fleet.logs()) from None
    assert flow_fleet.stop() == [0] * WORKERS, flow_fleet.logs()
    wait_for_sessions_to_end(db, flow_fleet.application_name)

    assert flow_fleet.exits == [], "a worker died without being killed"
    assert kills >= 3, f"the chord finished before the chaos began (seed {seed})"
    assert count(db, "status <> 'completed'") == 0
    assert count(db, "kind = 'flow.member'") == MEMBERS
    assert count(db, "kind = 'flow.collect'") == 1
    assert unaccounted_runs(db) == [], f"seed {seed}"  # each member completed exactly once
    assert ref.result(timeout=5) == sum(range(MEMBERS))
    # Every run of the callback saw all members' results (in order: their sum and
    # count match only with every one present, the payload check pins the order).
    runs = db.all("SELECT * FROM {{prefix}}_callback_runs ORDER BY run_count")
    assert runs and all(r["members"] == MEMBERS for r in runs), runs
    completed_runs = db.scalar(
        "SELECT count(*) FROM {{prefix}}_journal WHERE job_id = %s AND outcome = 'completed'",
        (callback,),
    )
    assert completed_runs == 1
    payload = db.one("SELECT payload FROM {{prefix}}_jobs WHERE id = %s", (callback,))["payload"]
    assert payload == {"values": list(range(MEMBERS))}
    step = db.one("SELECT status, waiting_for FROM {{prefix}}_steps WHERE id = %s", (callback,))
    assert step == {"status": "enqueued", "waiting_for": 0}
    logger.info(
        "%d kills, %d member(s) recovered, callback ran %d time(s)",
        kills,
        count(db, "run_count > 1"),
        len(runs),
    )
