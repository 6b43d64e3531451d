"""Rolling upgrades (SPEC 6.4, ADR 0140): a worker of the previous release keeps serving a
prefix migrated by this one, side by side with a worker of this code, and no job is lost
or run twice; this code's worker on a prefix the previous release migrated refuses to
start with one line.

The previous release is derived from git (``packaging_support.previous_release``): the
newest release tag before ``HEAD``, else the commit where the previous migration was the
latest. It is exported with ``git archive``, built with ``python -m build`` and its wheel
installed in a fresh virtual environment outside the checkout.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from packaging_support import (
    Installed,
    Previous,
    build,
    clean_env,
    export,
    install,
    newest_schema,
    previous_release,
)
from support import drop_prefix, wait_until

import venturi

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT = 120
JOBS_PER_SIDE = 40

#: Loaded by both builds' workers and enqueuers (``--app rollapp:app``): only API that
#: both releases have. Each handler call writes one row naming the build that ran it,
#: so a job run twice shows as two rows, whatever the journal recorded.
APP_MODULE = """\
import os
import time

import psycopg

import venturi

URL = os.environ["VENTURI_DATABASE_URL"]
PREFIX = os.environ["ROLL_PREFIX"]
app = venturi.App(URL, prefix=PREFIX)


@app.task(kind="roll.record")
def record(n: int) -> int:
    time.sleep(0.02)
    with psycopg.connect(URL, autocommit=True) as conn:
        side = os.environ["ROLL_SIDE"]
        conn.execute(f"INSERT INTO {PREFIX}_roll_runs (n, side) VALUES (%s, %s)", (n, side))
    return n
"""

ENQUEUE = (
    "import sys; from rollapp import record; "
    "start = int(sys.argv[1]); print(len([record.delay(n) for n in range(start, start + {count})]))"
)


@pytest.fixture(scope="module")
def previous() -> Previous:
    return previous_release(ROOT)


@pytest.fixture(scope="module")
def previous_build(previous: Previous, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    source = export(ROOT, previous.commit, tmp_path_factory.mktemp("previous-source"))
    distribution = build(source, tmp_path_factory.mktemp("previous-dist"))
    return install(distribution, tmp_path_factory.mktemp("previous-venv") / "env")


@pytest.fixture
def roll_prefix(database_url: str) -> Iterator[str]:
    value = f"roll_{secrets.token_hex(5)}"
    yield value
    drop_prefix(database_url, value)


class Side:
    """One build's commands, run from the directory holding ``rollapp.py``."""

    def __init__(self, name: str, python: Path, env: dict[str, str], where: Path) -> None:
        self.name = name
        self.python = python
        self.env = {**env, "ROLL_SIDE": name}
        self.where = where

    def command(self, *args: str) -> list[str]:
        return [str(self.python), "-m", "venturi", *args]

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            cwd=self.where,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    def enqueue(self, start: int) -> None:
        code = ENQUEUE.format(count=JOBS_PER_SIDE)
        result = self.run(str(self.python), "-c", code, str(start))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(JOBS_PER_SIDE)

    def worker(self, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as output:
            return subprocess.Popen(
                self.command("worker", "--app", "rollapp:app", "--concurrency", "2"),
                cwd=self.where,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )


def sides(
    previous_build: Installed, database_url: str, prefix: str, where: Path
) -> tuple[Side, Side]:
    (where / "rollapp.py").write_text(APP_MODULE)
    env = clean_env(VENTURI_DATABASE_URL=database_url, ROLL_PREFIX=prefix)
    old = Side("previous", previous_build.python, env, where)
    # This checkout's code, whatever the interpreter has installed.
    new = Side("current", Path(sys.executable), {**env, "PYTHONPATH": str(ROOT)}, where)
    return old, new


def test_a_previous_release_worker_serves_beside_a_current_one_losing_no_job(
    previous: Previous,
    previous_build: Installed,
    database_url: str,
    roll_prefix: str,
    tmp_path: Path,
) -> None:
    old, new = sides(previous_build, database_url, roll_prefix, tmp_path)
    # The previous build really is another installation, of older code.
    where = old.run(str(old.python), "-c", "import venturi; print(venturi.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(previous_build.root), where.stderr
    assert previous.schema <= newest_schema(ROOT)

    # The current code migrates the prefix (as a deploy's migrate Job does first).
    migrated = new.run(*new.command("migrate", "--app", "rollapp:app"))
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {roll_prefix}_roll_runs (n integer NOT NULL, side text)")

    old.enqueue(0)  # before any worker: both will find these
    workers = {side.name: side.worker(tmp_path / f"{side.name}.log") for side in (old, new)}
    checker = venturi.App(database_url, prefix=roll_prefix, set_as_current=False)
    try:
        # Both serve before the rest is enqueued (each registers as it starts, ADR 0119).
        wait_until(lambda: len(checker.workers()) == 2, timeout=60, every=0.1)
        new.enqueue(JOBS_PER_SIDE)
        old.enqueue(2 * JOBS_PER_SIDE)
        new.enqueue(3 * JOBS_PER_SIDE)
        total = 4 * JOBS_PER_SIDE
        wait_until(
            lambda: checker.count_jobs(status="completed") == total, timeout=120, every=0.25
        )
        assert checker.count_jobs() == total
    finally:
        checker.close()
        for process in workers.values():
            process.send_signal(signal.SIGTERM)
        for process in workers.values():
            process.wait(timeout=60)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in workers}
    for name, process in workers.items():
        assert process.returncode == 0, logs[name]

    with psycopg.connect(database_url, autocommit=True) as conn:
        runs = conn.execute(f"SELECT n, side FROM {roll_prefix}_roll_runs").fetchall()
        completed = conn.execute(
            f"SELECT count(*) FROM {roll_prefix}_journal WHERE outcome = 'completed'"
        ).fetchone()
        other = conn.execute(
            f"SELECT count(*) FROM {roll_prefix}_journal WHERE outcome <> 'completed'"
        ).fetchone()
    # Every job ran exactly once, and each build ran some of them.
    assert sorted(n for n, _ in runs) == list(range(total)), logs
    assert {side for _, side in runs} == {"previous", "current"}, logs
    assert completed == (total,)
    assert other == (0,), logs


def test_this_codes_worker_on_a_schema_older_than_it_needs_refuses_with_one_line(
    previous: Previous,
    previous_build: Installed,
    database_url: str,
    roll_prefix: str,
    tmp_path: Path,
) -> None:
    if previous.schema == newest_schema(ROOT):
        pytest.skip(f"the previous release ({previous.why}) has this code's schema")
    old, new = sides(previous_build, database_url, roll_prefix, tmp_path)
    migrated = old.run(*old.command("migrate", "--app", "rollapp:app"))
    assert migrated.returncode == 0, migrated.stderr
    refused = new.run(*new.command("worker", "--app", "rollapp:app"))
    assert refused.returncode != 0
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert roll_prefix in lines[0]
    assert "run `venturi migrate`" in lines[0]
