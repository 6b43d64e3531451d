"""Durable steps under SIGKILL (SPEC 6.1, ADR 0137): no step's function runs again
once its step was recorded, and every job ends completed with its steps in order.

Three real ``venturi worker`` processes (``durable_app.py``) run durable jobs of
five steps with a durable sleep in the middle, while the test SIGKILLs one of
them at random every half second and starts a fresh one in its place. Every
call of a step function is appended to a file outside the database before the
step is recorded. At the end, for every job and step: exactly one call was made
by the run that recorded the step, none by a later run (a call by an earlier run
is a step interrupted before it was recorded, which runs again by design), and
the recorded value is that call's. The figures (jobs, kills, calls, repeats
before recording) are logged and printed. The same holds across restarts of the
server itself (a private cluster) during the runs.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import durable_app
import orjson
import psycopg
import pytest
from fault_tools import WorkerFleet, count_on, wait_for_sessions_to_end
from private_server import PrivateServer
from psycopg.rows import dict_row
from support import Database, count, wait_until

logger = logging.getLogger(__name__)

WORKERS = 3
JOBS = 400
KILL_EVERY = 0.5
DRAIN_TIMEOUT = 240.0
RECOVERY_TIMEOUT = 60.0


def unaccounted_runs(db: Any) -> list[tuple[str, list[tuple[int, str]]]]:
    """Jobs whose journal does not account for each run exactly once: ``paused`` (its
    durable sleep), ``stale-recovered`` (its worker killed) or ``retried`` (a step's
    statement cut by a server restart) for every run but the last, ``completed`` for
    the last, and one failure counted per recovery or retry."""
    entries: dict[str, list[tuple[int, str]]] = {}
    for entry in db.all("SELECT job_id, run_no, outcome FROM {{prefix}}_journal ORDER BY id"):
        entries.setdefault(entry["job_id"], []).append((entry["run_no"], entry["outcome"]))
    bad = []
    for job in db.all("SELECT id, status, run_count, failure_count FROM {{prefix}}_jobs"):
        journal = entries.get(job["id"], [])
        runs = [run for run, _ in journal]
        outcomes = [outcome for _, outcome in journal]
        if (
            job["status"] != "completed"
            or runs != list(range(1, job["run_count"] + 1))
            or outcomes[-1:] != ["completed"]
            or not set(outcomes[:-1]) <= {"paused", "stale-recovered", "retried"}
            or job["failure_count"] != outcomes.count("stale-recovered") + outcomes.count("retried")
        ):
            bad.append((job["id"], journal))
    return bad


def check_steps(
    db: Any, calls_file: Path, jobs: int, seed: object
) -> tuple[dict[Any, list[int]], int]:
    """Every job's steps recorded in order, each step's function called exactly once by
    the run that recorded it and never after, its recorded value that call's; returns
    the calls by (job, step) and how many calls were repeats of unrecorded steps."""
    calls: dict[tuple[str, int], list[int]] = {}
    for line in calls_file.read_text().splitlines():
        job_id, step, run, _pid = line.split()
        calls.setdefault((job_id, int(step)), []).append(int(run))
    recorded = db.all(
        "SELECT job_id, name, run_no, result::text AS result FROM {{prefix}}_checkpoints "
        "WHERE kind = 'step' ORDER BY job_id, position"
    )
    by_job: dict[str, list[dict[str, Any]]] = {}
    for row in recorded:
        by_job.setdefault(row["job_id"], []).append(row)
    assert len(by_job) == jobs
    repeats = 0
    for job_id, steps in by_job.items():
        # Every step recorded, in order.
        assert [s["name"] for s in steps] == [f"step-{i}" for i in range(durable_app.STEPS)]
        for i, step in enumerate(steps):
            runs = calls[(job_id, i)]
            recorded_by = step["run_no"]
            assert runs.count(recorded_by) == 1, (job_id, i, runs, recorded_by, seed)
            assert max(runs) == recorded_by, (job_id, i, runs, recorded_by, seed)  # none after
            assert orjson.loads(step["result"]) == {"step": i, "run": recorded_by}
            repeats += len(runs) - 1
        assert [s["run_no"] for s in steps] == sorted(s["run_no"] for s in steps)
    # The results the jobs returned are their recorded steps' values.
    results = db.all("SELECT id, result::text AS result FROM {{prefix}}_jobs")
    for row in results:
        assert [r["run"] for r in orjson.loads(row["result"])] == [
            s["run_no"] for s in by_job[row["id"]]
        ]
    return calls, repeats


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "calls.txt"


@pytest.fixture
def durable_fleet(
    db: Any, database_url: str, prefix: str, tmp_path: Path, calls_file: Path
) -> Iterator[WorkerFleet]:
    started = WorkerFleet(
        database_url,
        prefix,
        tmp_path,
        application_name=f"venturi-durable-{prefix}",
        app="durable_app:app",
        env={durable_app.CALLS_ENV: str(calls_file)},
    )
    yield started
    started.kill_all()
    wait_for_sessions_to_end(db, started.application_name)


@pytest.mark.slow
def test_workers_sigkilled_at_random_never_repeat_a_recorded_step(
    db: Any, durable_fleet: WorkerFleet, database_url: str, prefix: str, calls_file: Path
) -> None:
    queue, order = durable_app.build_app(database_url, prefix)
    try:
        order.delay_many([{"n": n} for n in range(JOBS)])
    finally:
        queue.close()

    durable_fleet.start(WORKERS)
    kills, seed = durable_fleet.kill_at_random_while(
        lambda: count(db, "status <> 'completed'") > JOBS // 10,
        every=KILL_EVERY,
        timeout=DRAIN_TIMEOUT,
    )
    try:
        wait_until(lambda: count(db, "status = 'completed'") == JOBS, timeout=RECOVERY_TIMEOUT)
    except AssertionError:
        raise AssertionError(durable_fleet.logs()) from None
    assert durable_fleet.stop() == [0] * WORKERS, durable_fleet.logs()
    wait_for_sessions_to_end(db, durable_fleet.application_name)

    assert durable_fleet.exits == [], "a worker died without being killed"
    assert count(db, "status <> 'completed'") == 0
    assert unaccounted_runs(db) == [], f"seed {seed}"

    calls, repeats = check_steps(db, calls_file, JOBS, seed)
    total_calls = sum(len(runs) for runs in calls.values())
    recovered = count(db, "failure_count > 0")
    runs_per_job = Counter(r["run_count"] for r in db.all("SELECT run_count FROM {{prefix}}_jobs"))
    figures = (
        f"durable chaos: {JOBS} jobs, {kills} kills (seed {seed}), "
        f"{JOBS * durable_app.STEPS} steps recorded, {total_calls} step calls, "
        f"{repeats} calls repeated because interrupted before recording, "
        f"{recovered} jobs recovered from a killed worker, runs per job {dict(runs_per_job)}"
    )
    logger.info(figures)
    print(figures)
    assert kills >= 3, f"the jobs ended before the chaos began (seed {seed})"
    assert recovered > 0, f"{kills} kills interrupted no run (seed {seed})"
    assert repeats > 0, f"{kills} kills interrupted no step function (seed {seed})"


@pytest.mark.slow
def test_server_restarts_during_durable_runs_never_repeat_a_recorded_step(
    private_server: PrivateServer, tmp_path: Path, calls_file: Path
) -> None:
    url = private_server.url
    prefix = "durable_restart"
    jobs = 300
    queue, order = durable_app.build_app(url, prefix)
    try:
        queue.migrate()
        order.delay_many([{"n": n} for n in range(jobs)])
    finally:
        queue.close()
    fleet = WorkerFleet(
        url,
        prefix,
        tmp_path,
        application_name="venturi-durable-restart",
        app="durable_app:app",
        env={durable_app.CALLS_ENV: str(calls_file)},
    )
    try:
        fleet.start(WORKERS)
        fleet.wait_started()
        restarts = 0
        while restarts < 2 and count_on(url, prefix, "status <> 'completed'") > jobs // 5:
            wait_until(lambda: calls_file.exists() and calls_file.stat().st_size > 0, timeout=30)
            threading.Event().wait(1.0)  # steps in flight
            private_server.restart()
            restarts += 1
        try:
            wait_until(
                lambda: count_on(url, prefix, "status = 'completed'") == jobs,
                timeout=DRAIN_TIMEOUT,
            )
        except AssertionError:
            raise AssertionError(fleet.logs()) from None
        assert fleet.stop() == [0] * WORKERS, fleet.logs()
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            db = Database(conn, prefix)
            wait_for_sessions_to_end(db, fleet.application_name)
            assert restarts == 2, "the jobs ended before the second restart"
            assert unaccounted_runs(db) == []
            calls, repeats = check_steps(db, calls_file, jobs, "restart")
            retried = count(db, "failure_count > 0")
        figures = (
            f"durable restarts: {jobs} jobs, {restarts} server restarts, "
            f"{sum(len(r) for r in calls.values())} step calls, {repeats} repeated before "
            f"recording, {retried} jobs with a failed run"
        )
        logger.info(figures)
        print(figures)
    finally:
        fleet.kill_all()
