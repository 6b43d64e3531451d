"""What a new user runs into first, through the console script against the real server.

Fail fast (a prefix never migrated, a database that does not exist), say what
happened (one line per run end, the start banners, JSON lines), and the small
frictions of the CLI (paging hint, id case, cron ranges, usage hints). ADR 0118.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from support import drop_prefix, drop_prefix_tables, wait_until

import venturi
from venturi.errors import SchemaMissing
from venturi.worker import Worker

HERE = Path(__file__).parent
#: A hang guard, not a speed assertion: a refused start must end on its own, well within this.
START_TIMEOUT = 30
APP = ("--app", "day_one_app:app")


def env_for(database_url: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DATABASE_URL=database_url, CLI_TEST_PREFIX=prefix, PYTHONUNBUFFERED="1")
    return env


def venturi_cli(database_url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "venturi", *args],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=env_for(database_url, prefix),
        timeout=START_TIMEOUT,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str], status: int) -> str:
    assert result.returncode == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("venturi: error: ")
    return lines[0]


@pytest.fixture(autouse=True)
def _empty_tables(app: venturi.App) -> None:
    """Every test starts on the module's prefix with no jobs (the ``app`` fixture truncates)."""


@pytest.fixture
def unmigrated_prefix(database_url: str) -> Iterator[str]:
    value = f"t_day_{secrets.token_hex(4)}"
    yield value
    drop_prefix(database_url, value)  # a test may migrate it: every table a prefix can have


# ----------------------------------------------------------------- fail fast


@pytest.mark.parametrize(
    ("command", "app"), [("worker", "day_one_app:app"), ("beat", "cli_app:app")]
)
def test_a_service_on_an_unmigrated_prefix_exits_1_with_the_migrate_line(
    database_url: str, unmigrated_prefix: str, command: str, app: str
) -> None:
    result = venturi_cli(database_url, unmigrated_prefix, command, "--app", app)

    line = one_error_line(result, 1)
    assert f"the tables of prefix {unmigrated_prefix!r} do not exist" in line
    assert "run `venturi migrate`" in line


@pytest.mark.parametrize(
    ("command", "app"), [("worker", "day_one_app:app"), ("beat", "cli_app:app")]
)
def test_a_service_on_a_database_that_does_not_exist_exits_1_with_one_line(
    database_url: str, prefix: str, command: str, app: str
) -> None:
    missing = f"venturi_no_such_db_{secrets.token_hex(3)}"
    url = make_conninfo(database_url, dbname=missing)

    result = venturi_cli(database_url, prefix, command, "--app", app, "--database-url", url)

    line = one_error_line(result, 1)
    assert f'the database refused the connection: database "{missing}" does not exist' in line
    assert "not retried" in line


def test_stats_says_the_same_line_as_the_worker_for_an_unmigrated_prefix(
    database_url: str, unmigrated_prefix: str
) -> None:
    worker = one_error_line(venturi_cli(database_url, unmigrated_prefix, "worker", *APP), 1)
    stats = one_error_line(venturi_cli(database_url, unmigrated_prefix, "stats", *APP), 1)
    assert worker == stats


def test_a_worker_whose_tables_vanish_mid_run_stops_and_run_raises_once(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A permanent error met by a loop (not at start) is not retried every 80 ms."""
    caplog.set_level(logging.INFO)
    value = f"t_day_{secrets.token_hex(4)}"
    own = venturi.App(database_url, prefix=value, set_as_current=False)
    own.task(kind="day.gone")(lambda: None)
    own.migrate()
    raised: list[BaseException] = []
    worker = Worker(own, concurrency=1, poll_interval=0.05)
    runner = threading.Thread(target=lambda: _run_catching(worker, raised), daemon=True)
    try:
        runner.start()
        wait_until(lambda: any("started" in r.getMessage() for r in caplog.records))
        _drop_under_live_worker(database_url, value)
        runner.join(timeout=START_TIMEOUT)
        assert not runner.is_alive()
    finally:
        worker.stop(grace=0)
        own.close()
    assert len(raised) == 1 and isinstance(raised[0], SchemaMissing), raised
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "do not exist" in r.message]
    assert 1 <= len(errors) <= 3, [r.message for r in errors]  # once per loop, not per retry
    assert all(r.exc_info is None for r in errors)


def _drop_under_live_worker(database_url: str, prefix: str) -> None:
    """Drop the prefix's tables while its worker runs. The DROP's exclusive lock can
    deadlock with the worker's statements; the server then aborts one side, and when
    it is the DROP, it is simply tried again."""
    for _ in range(20):
        try:
            with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
                drop_prefix_tables(conn, prefix)
            return
        except psycopg.errors.DeadlockDetected:
            continue
    raise AssertionError("the tables could not be dropped under the running worker")


def _run_catching(worker: Worker, raised: list[BaseException]) -> None:
    try:
        worker.run()
    except BaseException as exc:
        raised.append(exc)


# --------------------------------------------------------- say what happened


class Service:
    """``venturi worker|beat`` in a subprocess, stopped with SIGTERM; its stderr lines."""

    def __init__(self, database_url: str, prefix: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "venturi", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env=env_for(database_url, prefix),
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def has(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in list(self.lines))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=START_TIMEOUT)
        self._reader.join(timeout=5)
        return status


@pytest.fixture
def service(database_url: str, prefix: str) -> Iterator[Any]:
    started: list[Service] = []

    def start(*args: str) -> Service:
        started.append(Service(database_url, prefix, *args))
        return started[-1]

    yield start
    for one in started:
        if one.process.poll() is None:
            one.process.kill()
            one.process.wait()


def enqueue_day_one(database_url: str, prefix: str) -> dict[str, str]:
    queue = venturi.App(database_url, prefix=prefix, set_as_current=False)
    try:
        ok = queue.task(kind="day.ok")(lambda n: n)
        flaky = queue.task(kind="day.flaky")(lambda: None)
        fatal = queue.task(kind="day.fatal")(lambda: None)
        return {"ok": ok.delay(7).id, "flaky": flaky.delay().id, "fatal": fatal.delay().id}
    finally:
        queue.close()


def test_a_worker_logs_its_banner_and_one_info_line_per_run_end(
    database_url: str, prefix: str, service: Any
) -> None:
    ids = enqueue_day_one(database_url, prefix)
    worker = service("worker", *APP, "--concurrency", "2")
    ok, flaky, fatal = ids["ok"], ids["flaky"], ids["fatal"]
    wait_until(lambda: worker.has(rf"day\.flaky {flaky} run 3 dead"), timeout=20)
    wait_until(lambda: worker.has(rf"day\.fatal {fatal} run 1 dead"), timeout=20)
    assert worker.stop() == 0

    text = "\n".join(worker.lines)
    banner = next(line for line in worker.lines if " started: " in line)
    assert re.search(
        r"INFO venturi\.worker: worker \S+:\d+ started: concurrency 2, kinds day\.fatal, "
        rf"day\.flaky, day\.ok; venturi \S+, database [^ ]+:\d+/\w+, prefix {prefix}$",
        banner,
    ), banner
    completed = rf"INFO venturi\.runs: day\.ok {ok} run 1 completed in [0-9.]+ m?s$"
    assert re.search(completed, text, flags=re.MULTILINE), text
    first = rf"WARNING venturi\.runs: day\.flaky {flaky} run 1 retried in [0-9.]+ m?s: "
    first += r"ConnectionError: upstream refused; next run at \d\d:\d\d:\d\d \(in [0-9.]+ m?s\)"
    assert re.search(first, text), text
    assert re.search(rf"INFO venturi\.runs: day\.flaky {flaky} run 2 retried in ", text), text
    dead = rf"ERROR venturi\.runs: day\.flaky {flaky} run 3 dead in [0-9.]+ m?s: backstop reached"
    assert re.search(dead, text), text
    assert re.search(rf"ERROR venturi\.runs: day\.fatal {fatal} run 1 dead in .*: bad input", text)
    # One traceback per job: the first failed run of each, not one per retry.
    assert text.count("Traceback (most recent call last)") == 2, text


def test_json_logs_are_one_object_a_line_with_named_fields(
    database_url: str, prefix: str, service: Any
) -> None:
    ids = enqueue_day_one(database_url, prefix)
    worker = service("worker", *APP, "--log-format", "json", "--log-level", "info")
    wait_until(lambda: worker.has(rf'"job_id":"{ids["fatal"]}"'), timeout=20)
    wait_until(lambda: worker.has(rf'"job_id":"{ids["flaky"]}","kind":"day.flaky","run":3'))
    assert worker.stop() == 0

    lines = [orjson.loads(line) for line in worker.lines]  # every line parses
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    runs = [line for line in lines if line["logger"] == "venturi.runs"]
    completed = next(line for line in runs if line.get("job_id") == ids["ok"])
    assert completed["level"] == "INFO"
    assert completed["kind"] == "day.ok"
    assert (completed["run"], completed["outcome"]) == (1, "completed")
    assert completed["duration_ms"] >= 0
    assert completed["time"].endswith("Z")
    assert "exception" not in completed
    flaky = [line for line in runs if line.get("job_id") == ids["flaky"]]
    assert [(line["run"], line["outcome"]) for line in flaky] == [
        (1, "retried"),
        (2, "retried"),
        (3, "dead"),
    ]
    assert "ConnectionError: upstream refused" in flaky[0]["exception"]
    assert ["exception" in line for line in flaky] == [True, False, False]


def test_a_warning_level_keeps_run_lines_out_but_failures_in(
    database_url: str, prefix: str, service: Any
) -> None:
    ids = enqueue_day_one(database_url, prefix)
    worker = service("worker", *APP, "--log-level", "WARNING")
    wait_until(lambda: worker.has(rf"day\.flaky {ids['flaky']} run 3 dead"), timeout=20)
    assert worker.stop() == 0
    assert not worker.has(r" INFO "), worker.lines
    assert worker.has(rf"WARNING venturi\.runs: day\.flaky {ids['flaky']} run 1 retried")


@pytest.mark.slow
def test_beat_logs_its_schedules_the_ticks_it_enqueues_and_its_leadership(
    database_url: str, prefix: str, service: Any
) -> None:
    beat = service("beat", "--app", "cli_app:app")
    wait_until(lambda: beat.has(r"schedule cli\.tick: enqueued its tick \S+ as job \w{26}$"))
    standby = service("beat", "--app", "cli_app:app")
    wait_until(lambda: standby.has("beat is standing by: another beat is the active scheduler"))
    assert beat.stop() == 0
    wait_until(lambda: standby.has(f"beat took over as the active scheduler of prefix {prefix}"))
    assert standby.stop() == 0

    assert beat.has(
        rf"INFO venturi\.beat: beat started for prefix {prefix}, database \S+: 1 schedule"
    )
    assert beat.has(
        r"schedule cli\.tick: '\* \* \* \* \*' in UTC, runs cli\.tick, next tick \S+:00\+00:00"
    )
    assert beat.has(f"beat is the active scheduler of prefix {prefix}")


# ------------------------------------------------------------ small frictions


def test_job_ids_are_found_in_lower_case(database_url: str, prefix: str) -> None:
    job_id = enqueue_day_one(database_url, prefix)["ok"]
    result = venturi_cli(
        database_url, prefix, "jobs", "show", job_id.lower(), "--prefix", prefix, "--json"
    )
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["job"]["id"] == job_id


def test_the_paging_hint_keeps_the_app_prefix_and_filters(database_url: str, prefix: str) -> None:
    for _ in range(3):
        enqueue_day_one(database_url, prefix)
    args = ["jobs", "list", *APP, "--prefix", prefix, "--kind", "day.ok", "--limit", "2"]

    result = venturi_cli(database_url, prefix, *args)

    assert result.returncode == 0, result.stderr
    hint = result.stdout.splitlines()[-1]
    expected = (
        f"next page: venturi jobs list --app day_one_app:app --prefix {prefix} "
        "--kind day.ok --limit 2 --after "
    )
    assert hint.startswith(expected), hint
    rest = venturi_cli(database_url, prefix, *hint.removeprefix("next page: venturi ").split())
    assert rest.returncode == 0, rest.stderr
    assert "day.ok" in rest.stdout


def test_the_listing_shows_the_last_note_of_each_job(
    database_url: str, prefix: str, service: Any
) -> None:
    ids = enqueue_day_one(database_url, prefix)
    worker = service("worker", *APP)
    wait_until(lambda: worker.has(rf"day\.fatal {ids['fatal']} run 1 dead"), timeout=20)
    assert worker.stop() == 0

    result = venturi_cli(
        database_url, prefix, "jobs", "list", "--prefix", prefix, "--kind", "day.fatal"
    )
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[-1] == "NOTE"
    assert row.startswith(ids["fatal"]) and row.endswith("  bad input"), row


def test_a_database_url_with_a_password_is_not_echoed_in_the_paging_hint(
    database_url: str, prefix: str
) -> None:
    for _ in range(2):
        enqueue_day_one(database_url, prefix)
    url = make_conninfo(database_url, password="s3cret-value")

    result = venturi_cli(
        database_url,
        prefix,
        "jobs",
        "list",
        "--prefix",
        prefix,
        "--database-url",
        url,
        "--limit",
        "1",
    )

    assert result.returncode == 0, result.stderr
    assert "next page: " in result.stdout
    assert "s3cret-value" not in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["worker", *APP, "--prefetch", "1001"], "up to 1000 (see venturi worker --help)"),
        (["jobs", "list", "--limit", "0"], "(see venturi jobs list --help)"),
        (
            ["worker"],
            "no tasks to run: pass --app module:attribute to load your tasks "
            "(see venturi worker --help)",
        ),
        (["worker", *APP, "--log-format", "xml"], "(see venturi worker --help)"),
    ],
)
def test_usage_errors_point_to_the_help_of_their_command(
    database_url: str, prefix: str, args: list[str], fragment: str
) -> None:
    assert one_error_line(venturi_cli(database_url, prefix, *args), 2).endswith(fragment)
