"""Worker processes killed or signalled mid-run lose no job (SPEC section 4, ADR 19, 21).

Each test runs ``worker_process.py`` as a real subprocess on this module's
prefix and reads the outcome from the tables: which rows ended how, and what
the journal says happened to them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import worker_process
from support import wait_until

import venturi

SCRIPT = Path(worker_process.__file__)
#: The jobs that hang in a worker started with WORKER_TEST_STALL=1.
STALLING = "mod((payload->>'n')::int, 100) = 50"


class Processes:
    """Starts worker subprocesses; kills whatever is left at teardown."""

    def __init__(self, database_url: str, prefix: str, logs: Path) -> None:
        self._database_url = database_url
        self._prefix = prefix
        self._logs = logs
        self._started: list[subprocess.Popen[bytes]] = []

    def start(self, **env: str) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            "WORKER_TEST_DATABASE_URL": self._database_url,
            "WORKER_TEST_PREFIX": self._prefix,
            **env,
        }
        log = self._logs / f"worker-{len(self._started)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, str(SCRIPT)],
                env=environment,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self._started.append(process)
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        index = self._started.index(process)
        return (self._logs / f"worker-{index}.log").read_text(errors="replace")

    def kill_all(self) -> None:
        for process in self._started:
            if process.poll() is None:
                process.kill()
                process.wait(10)


@pytest.fixture
def processes(
    app: venturi.App, database_url: str, prefix: str, tmp_path: Path
) -> Iterator[Processes]:
    started = Processes(database_url, prefix, tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def tasks(database_url: str, prefix: str) -> Iterator[tuple[Any, Any]]:
    app, work, hang = worker_process.build_app(database_url, prefix)
    yield work, hang
    app.close()


def count(db: Any, where: str, params: Any = None) -> int:
    return int(db.scalar(f"SELECT count(*) FROM {{{{prefix}}}}_jobs WHERE {where}", params))


def worker_id(process: subprocess.Popen[bytes]) -> str:
    return f"{socket.gethostname()}:{process.pid}"


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_no_job_and_its_runs_are_recovered(
    db: Any, processes: Processes, tasks: tuple[Any, Any]
) -> None:
    work, _ = tasks
    work.delay_many([{"n": n} for n in range(500)])

    application = f"venturi-kill-test-{db.prefix}"
    first = processes.start(WORKER_TEST_STALL="1", PGAPPNAME=application)
    wait_until(lambda: count(db, "status = 'completed'") >= 100, timeout=20)
    wait_until(lambda: count(db, f"status = 'claimed' AND {STALLING}") >= 1, timeout=20)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    # A statement the process sent just before dying still runs to its commit on
    # the server: look at the rows only once its server sessions are gone.
    wait_until(
        lambda: (
            not db.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
            )
        )
    )
    held_at_kill = {
        r["id"]: r["stalled"]
        for r in db.all(
            f"""
            SELECT id, {STALLING} AS stalled FROM {{{{prefix}}}}_jobs
            WHERE status = 'claimed' AND claimed_by = %s
            """,
            (worker_id(first),),
        )
    }
    hanging = {job_id for job_id, stalled in held_at_kill.items() if stalled}
    assert hanging, "the killed worker held no hanging job"

    second = processes.start()
    try:
        wait_until(lambda: count(db, "status = 'completed'") == 500, timeout=30)
    except AssertionError:
        raise AssertionError(processes.log(second)) from None
    second.send_signal(signal.SIGTERM)
    assert second.wait(15) == 0, processes.log(second)

    assert count(db, "status <> 'completed'") == 0
    completions = db.all(
        """
        SELECT job_id, count(*) AS n FROM {{prefix}}_journal
        WHERE outcome = 'completed' GROUP BY job_id
        """
    )
    assert len(completions) == 500
    assert {r["n"] for r in completions} == {1}
    recovered = {
        r["job_id"]
        for r in db.all("SELECT job_id FROM {{prefix}}_journal WHERE outcome = 'stale-recovered'")
    }
    assert recovered == held_at_kill.keys()
    assert count(db, "failure_count = 1") == len(recovered)
    assert count(db, "failure_count > 1") == 0


@pytest.mark.slow
def test_sigterm_stops_the_worker_with_exit_status_0_and_leaves_no_job_claimed(
    db: Any, processes: Processes, tasks: tuple[Any, Any]
) -> None:
    work, hang = tasks
    stuck = hang.delay()
    done = [work.delay(n) for n in range(5)]

    worker = processes.start(WORKER_TEST_GRACE="0.5")
    wait_until(lambda: count(db, "status = 'completed'") == 5, timeout=20)
    wait_until(lambda: count(db, "status = 'claimed'") == 1, timeout=20)
    worker.send_signal(signal.SIGTERM)

    assert worker.wait(15) == 0, processes.log(worker)
    assert count(db, "status = 'claimed'") == 0
    job = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (stuck.id,))
    assert (job["status"], job["failure_count"]) == ("pending", 0)
    assert [e["outcome"] for e in db.journal(stuck.id)] == ["released"]
    assert all(db.journal(ref.id)[-1]["outcome"] == "completed" for ref in done)


@pytest.mark.slow
def test_a_second_sigterm_stops_at_once_without_waiting_for_the_grace(
    db: Any, processes: Processes, tasks: tuple[Any, Any]
) -> None:
    _, hang = tasks
    stuck = hang.delay()

    worker = processes.start(WORKER_TEST_GRACE="600")
    wait_until(lambda: count(db, "status = 'claimed'") == 1, timeout=20)
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping" in processes.log(worker), timeout=20)
    worker.send_signal(signal.SIGTERM)

    assert worker.wait(15) == 0, processes.log(worker)
    job = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (stuck.id,))
    assert (job["status"], job["failure_count"]) == ("pending", 0)
    assert [e["outcome"] for e in db.journal(stuck.id)] == ["released"]
