"""Tools of the reliability suite: worker subprocesses, a breakable TCP proxy,
table checksums and the per-run accounting of the journal.

Nothing here fakes the database: workers are real ``venturi worker``
processes, the proxy forwards real bytes, and every check reads the tables.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from support import Database, count, wait_until

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent
#: How long a worker may take to stop on SIGTERM: a hang guard, not a speed check.
STOP_TIMEOUT = 20.0


class WorkerFleet:
    """``venturi worker`` subprocesses on one prefix, each in a numbered slot.

    Every process gets ``PGAPPNAME=application_name``, so the test can find
    (and terminate) its server sessions, and wait for a killed process's
    sessions to end. Output goes to one log file per process; ``kill_all()``
    at teardown leaves nothing running.
    """

    def __init__(
        self,
        database_url: str,
        prefix: str,
        logs: Path,
        *,
        application_name: str,
        concurrency: int = 4,
        app: str = "chaos_app:app",
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
    ) -> None:
        self.application_name = application_name
        self._logs = logs
        self._argv = [
            sys.executable,
            "-m",
            "venturi",
            "worker",
            "--app",
            app,
            "--concurrency",
            str(concurrency),
            *options,
        ]
        self._env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("VENTURI_", "PG"))},
            "VENTURI_DATABASE_URL": database_url,
            "CHAOS_PREFIX": prefix,
            "PGAPPNAME": application_name,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.slots: list[subprocess.Popen[bytes]] = []
        self._all: list[subprocess.Popen[bytes]] = []
        #: Exit status of every process that ended on its own, in order.
        self.exits: list[int] = []

    def start(self, count: int) -> None:
        for _ in range(count):
            self.slots.append(self._spawn())

    def _spawn(self) -> subprocess.Popen[bytes]:
        log = self._logs / f"worker-{len(self._all)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                self._argv, env=self._env, stdout=output, stderr=subprocess.STDOUT, cwd=HERE
            )
        self._all.append(process)
        return process

    def kill_and_restart(self, slot: int) -> None:
        """SIGKILL the process in ``slot`` and start a fresh one in its place."""
        process = self.slots[slot]
        process.kill()
        process.wait(10)
        self.slots[slot] = self._spawn()

    def restart_exited(self) -> int:
        """Replace every process that ended by itself; returns how many were replaced."""
        replaced = 0
        for slot, process in enumerate(self.slots):
            status = process.poll()
            if status is not None:
                self.exits.append(status)
                self.slots[slot] = self._spawn()
                replaced += 1
        return replaced

    def kill_at_random_while(
        self, busy: Callable[[], bool], *, every: float, timeout: float
    ) -> tuple[int, int]:
        """While ``busy()``, SIGKILL one process at random every ``every`` seconds,
        at whatever instant of its work it is, and start a fresh one in its slot
        (and in the slot of any that ended by itself, recorded in ``exits``).
        Returns (kills, seed); the seed is logged, so a failing order can be replayed."""
        seed = random.randrange(2**32)
        logger.info("kill order seed %d", seed)
        victims = random.Random(seed)
        kills = 0
        pace = threading.Event()
        deadline = time.monotonic() + timeout
        while busy():
            assert time.monotonic() < deadline, self.logs()
            pace.wait(every)
            self.restart_exited()
            self.kill_and_restart(victims.randrange(len(self.slots)))
            kills += 1
        return kills, seed

    def wait_started(self, timeout: float = 30.0) -> None:
        """Wait until every current process runs its worker (its signal handlers are
        installed only then: an earlier SIGTERM would end it by the default action)."""
        wait_until(lambda: all(" started: concurrency" in self.log(p) for p in self.slots), timeout)

    def all_running(self) -> bool:
        return all(process.poll() is None for process in self.slots)

    def stop(self) -> list[int]:
        """SIGTERM every running process once it runs its worker; returns their exit statuses."""
        self.wait_started()
        for process in self.slots:
            process.send_signal(signal.SIGTERM)
        return [process.wait(STOP_TIMEOUT) for process in self.slots]

    def kill_all(self) -> None:
        for process in self._all:
            if process.poll() is None:
                process.kill()
                process.wait(10)

    def log(self, process: subprocess.Popen[bytes]) -> str:
        index = self._all.index(process)
        return (self._logs / f"worker-{index}.log").read_text(errors="replace")

    def logs(self) -> str:
        """Every log, for a failure message."""
        return "\n".join(
            f"--- worker {i} (exit {p.poll()}) ---\n{self.log(p)[-4000:]}"
            for i, p in enumerate(self._all)
        )


def sessions_of(db: Any, application_name: str) -> int:
    return int(
        db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )
    )


def wait_for_sessions_to_end(db: Any, application_name: str, timeout: float = 20.0) -> None:
    """A statement a process sent just before it died still runs to its end on the
    server: the tables are final only once its sessions are gone."""
    wait_until(lambda: sessions_of(db, application_name) == 0, timeout=timeout)


def table_checksums(db: Any) -> dict[str, tuple[int, str | None]]:
    """Row count and md5 of every row's text, in id order, of both tables."""
    return {
        table: (
            int(row["rows"]),
            row["digest"],
        )
        for table in ("jobs", "journal")
        for row in [
            db.one(
                f"SELECT count(*) AS rows, md5(string_agg(t::text, '|' ORDER BY t.id)) AS digest "
                f"FROM {{{{prefix}}}}_{table} AS t"
            )
        ]
    }


def unaccounted_runs(db: Any) -> list[tuple[str, list[tuple[int, str]]]]:
    """Jobs whose journal does not account for each of their runs exactly once.

    For handlers that never fail, a run ends in exactly one entry of its
    ``run_no``: ``completed``, or ``stale-recovered`` when its worker vanished
    (killed, crashed, or cut off) before recording an outcome. So a completed
    job's journal, in order, is ``stale-recovered`` for runs 1..n-1 and
    ``completed`` for run n = ``run_count``, and its ``failure_count`` is n-1:
    every interrupted claim was recovered, and nothing ran twice unseen.
    Returns the offending jobs with their (run_no, outcome) entries.
    """
    entries: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for entry in db.all("SELECT job_id, run_no, outcome FROM {{prefix}}_journal ORDER BY id"):
        entries[entry["job_id"]].append((entry["run_no"], entry["outcome"]))
    bad = []
    for job in db.all("SELECT id, status, run_count, failure_count FROM {{prefix}}_jobs"):
        runs = job["run_count"]
        expected = [(n, "stale-recovered") for n in range(1, runs)] + [(runs, "completed")]
        journal = entries.get(job["id"], [])
        if job["status"] != "completed" or journal != expected or job["failure_count"] != runs - 1:
            bad.append((job["id"], journal))
    return bad


#: Invariant -> the query returning the rows that break it.
INVARIANTS = {
    "a claimed row has claimed_by and claim_expires_at, and no other row has either": """
        SELECT id, status, claimed_by, claim_expires_at FROM {{prefix}}_jobs
        WHERE (status = 'claimed') <> (claimed_by IS NOT NULL)
           OR (status = 'claimed') <> (claim_expires_at IS NOT NULL)
    """,
    "finished_at is set exactly on completed and dead rows": """
        SELECT id, status, finished_at FROM {{prefix}}_jobs
        WHERE (status IN ('completed', 'dead')) <> (finished_at IS NOT NULL)
    """,
    # A completed job can never leave `completed`, so a job that is not completed
    # must not have a completed entry either (that would be a completion lost or undone).
    "a completed job has exactly one completed journal entry, and no other job has one": """
        SELECT j.id, j.status, count(e.id) AS completions
        FROM {{prefix}}_jobs AS j
        LEFT JOIN {{prefix}}_journal AS e ON e.job_id = j.id AND e.outcome = 'completed'
        GROUP BY j.id, j.status
        HAVING count(e.id) <> (j.status = 'completed')::int
    """,
    "a journal entry's run_no never exceeds its job's run_count": """
        SELECT e.id, e.job_id, e.run_no, j.run_count
        FROM {{prefix}}_journal AS e JOIN {{prefix}}_jobs AS j ON j.id = e.job_id
        WHERE e.run_no > j.run_count
    """,
    "no journal entry outlives its job": """
        SELECT e.id, e.job_id FROM {{prefix}}_journal AS e
        WHERE NOT EXISTS (SELECT 1 FROM {{prefix}}_jobs AS j WHERE j.id = e.job_id)
    """,
}


class InvariantChecker:
    """Checks INVARIANTS on a set of prefixes; ``check()`` raises on the first broken one."""

    def __init__(self, database_url: str, prefixes: list[str]) -> None:
        self._database_url = database_url
        self._prefixes = list(prefixes)
        self.checked: list[str] = []

    def watch(self, prefix: str) -> None:
        """Check this prefix too when the test ends (it must still exist then)."""
        self._prefixes.append(prefix)

    def check(self) -> None:
        for prefix in self._prefixes:
            self.check_prefix(prefix)

    def check_prefix(self, prefix: str) -> None:
        with psycopg.connect(self._database_url, autocommit=True, row_factory=dict_row) as conn:
            for invariant, query in INVARIANTS.items():
                broken = conn.execute(query.replace("{{prefix}}", prefix)).fetchmany(5)
                assert not broken, f"invariant broken on prefix {prefix}: {invariant}: {broken}"
        self.checked.append(prefix)


def count_on(url: str, prefix: str, where: str) -> int:
    """``count`` on a fresh connection: one made before a restart would be broken."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return count(Database(conn, prefix), where)


class Sampler:
    """The claimed rows of a kind, counted every ``every`` seconds from a connection of
    its own while the ``with`` block runs; ``samples`` holds every count."""

    def __init__(self, database_url: str, prefix: str, kind: str, every: float = 0.02) -> None:
        self._sql = f"SELECT count(*) FROM {prefix}_jobs WHERE kind = %s AND status = 'claimed'"
        self._url, self._kind, self._every = database_url, kind, every
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(self._sql, (self._kind,)).fetchone()
                assert row is not None
                self.samples.append(row[0])
                self._stop.wait(self._every)

