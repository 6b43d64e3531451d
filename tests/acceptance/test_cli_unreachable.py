"""The console script against a database it cannot reach (SPEC 5.9, 6.6; ADR 0118).

- ``venturi worker`` and ``venturi beat`` whose database refuses connections
  exit 1 with one line naming the host and port, after waiting a bounded time
  for it: they never run on without a database.
- A database that answers within that wait (one restarting, or starting
  beside the worker) is waited for, and the worker then runs as usual.
- ``venturi stats`` on a refused port fails with the same kind of line.
- A worker started inside a host process (``Worker.start()``) on a refused
  port starts anyway, with one warning naming the host: the host keeps
  serving, and the worker's loops wait for the database.

Every subprocess has a hang guard (``COMMAND_TIMEOUT``), not a speed assertion.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import COMMAND_TIMEOUT, HERE, Run, cli_env, failed_with
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support import TcpProxy, wait_until

import venturi

REFUSED = "postgresql://postgres@127.0.0.1:1/x"
WORKER = ("--app", "cli_app:app", "worker", "--concurrency", "2", "--grace", "5")
CANNOT_REACH = "cannot reach 127.0.0.1:1 (connection refused)"


def start_waiting_worker(database_url: str, prefix: str, log: Path) -> subprocess.Popen[str]:
    """``venturi worker`` logging at DEBUG into ``log``, once it has failed a start check."""
    with log.open("w") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "venturi", *WORKER, "--log-level", "DEBUG"],
            cwd=HERE,
            env=cli_env(database_url, prefix),
            stdout=subprocess.DEVNULL,
            stderr=output,
            text=True,
        )
    try:
        wait_until(lambda: "at start; trying again" in log.read_text(), timeout=COMMAND_TIMEOUT)
    except AssertionError:
        worker.kill()
        worker.wait()
        raise AssertionError(log.read_text()) from None
    return worker


@pytest.mark.slow
def test_worker_and_beat_on_a_refused_port_exit_1_with_one_line_naming_the_host(
    prefix: str,
) -> None:
    # Both at once: each waits its bounded time for the database before giving up.
    processes = {
        command: subprocess.Popen(
            [sys.executable, "-m", "venturi", "--app", "cli_app:app", command],
            cwd=HERE,
            env=cli_env(REFUSED, prefix),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in ("worker", "beat")
    }
    results = {}
    try:
        for command, process in processes.items():
            stdout, stderr = process.communicate(timeout=COMMAND_TIMEOUT)
            results[command] = subprocess.CompletedProcess(
                process.args, process.returncode, stdout, stderr
            )
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()

    for result in results.values():
        line = failed_with(result, 1)
        assert line.startswith(f"venturi: error: database unavailable: {CANNOT_REACH}; "), line
        assert " gave up after " in line, line


def test_stats_on_a_refused_port_fails_with_one_line_naming_the_host(venturi_cli: Run) -> None:
    line = failed_with(venturi_cli("stats", "--database-url", REFUSED), 1)

    assert line == f"venturi: error: database unavailable: {CANNOT_REACH}"


def test_a_worker_started_before_its_database_answers_waits_for_it_then_runs_jobs(
    double: Any, db: Any, database_url: str, prefix: str, tmp_path: Path
) -> None:
    target = conninfo_to_dict(database_url)
    proxy = TcpProxy(str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
    proxy.stop()  # the port refuses connections until the "database" comes up
    proxied = make_conninfo(database_url, host="127.0.0.1", port=str(proxy.port))
    log = tmp_path / "worker.log"
    worker = start_waiting_worker(proxied, prefix, log)
    try:
        assert worker.poll() is None, log.read_text()
        proxy.start()
        ref = double.delay(21)
        wait_until(
            lambda: db.scalar("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
            == "completed"
            or worker.poll() is not None,
            timeout=COMMAND_TIMEOUT,
        )
        assert worker.poll() is None, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(COMMAND_TIMEOUT) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        proxy.stop()
    said = log.read_text()
    assert "database reachable after" in said, said
    assert " started: concurrency 2" in said, said
    assert "starting anyway" not in said, said
    assert "Traceback" not in said, said


def test_a_signal_during_the_wait_at_start_ends_it_with_the_one_line(
    prefix: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_waiting_worker(REFUSED, prefix, log)
    try:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(COMMAND_TIMEOUT) == 1, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    last = log.read_text().splitlines()[-1]
    assert last.startswith(f"venturi: error: database unavailable: {CANNOT_REACH}; "), last


def test_a_worker_started_inside_a_host_process_on_a_refused_port_starts_anyway(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = venturi.App(REFUSED, prefix=prefix, set_as_current=False)

    @app.task(kind="unreachable.noop")
    def noop() -> None:
        """Never runs: the database is not there."""

    worker = venturi.Worker(app, concurrency=1)
    try:
        with caplog.at_level(logging.INFO, logger="venturi"):
            worker.start()
    finally:
        worker.stop(grace=1)
        app.close()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("venturi")]
    at_start = [line for line in said if "at start" in line]
    assert at_start == [
        f"worker {worker.worker_id}: database unreachable at start; starting anyway: "
        f"database unavailable: {CANNOT_REACH}"
    ], said
    assert any(" started: concurrency 1" in line for line in said), said
