"""``venturi workers`` and the unserved-kind warnings, run for real in subprocesses (ADR 0119).

A ``venturi worker`` process registers itself, ``venturi workers`` lists it
(table and ``--json``), SIGTERM removes it; ``venturi stats`` (one
``venturi: warning:`` line on stderr, ``unserved_kinds`` in ``--json``) and the
worker's own log warn about kinds with due jobs that no live worker serves.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from support import Database, wait_until
from test_cli import COMMAND_TIMEOUT, HERE, Run, cli_env, json_of, succeeded

import venturi

WORKER_STOP_TIMEOUT = 30


@pytest.fixture(autouse=True)
def empty_registry(db: Database) -> None:
    db.execute(
        "TRUNCATE {{prefix}}_journal, {{prefix}}_jobs, {{prefix}}_workers,"
        " {{prefix}}_checkpoints, {{prefix}}_events"
    )


@pytest.fixture
def venturi_cli(database_url: str, prefix: str) -> Run:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "venturi", *args, "--prefix", prefix],
            capture_output=True,
            text=True,
            cwd=HERE,
            env=cli_env(database_url, prefix),
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    return run


class WorkerProcess:
    """A ``venturi worker --app registry_app:app`` process whose output goes to a file."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log_path = log

    @property
    def registry_id(self) -> str:
        return f"{socket.gethostname()}:{self.process.pid}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM once its signal handlers are installed (the banner is logged after)."""
        wait_until(lambda: " started: concurrency" in self.log(), timeout=30)
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(WORKER_STOP_TIMEOUT)


@pytest.fixture
def start_worker_process(
    database_url: str, prefix: str, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*options: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "venturi", "worker", "--app", "registry_app:app", *options],
                cwd=HERE,
                env=cli_env(database_url, prefix),
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        started.append(WorkerProcess(process, log))
        return started[-1]

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(10)


@pytest.fixture
def orphan(app: venturi.App) -> Any:
    """A task of a kind that the worker processes' App does not declare."""

    @app.task(kind="registry.orphan")
    def orphan(n: int) -> int:
        return n

    return orphan


@pytest.mark.slow
def test_venturi_workers_lists_a_running_worker_until_it_stops(
    venturi_cli: Run, start_worker_process: Callable[..., WorkerProcess]
) -> None:
    assert succeeded(venturi_cli("workers")) == "no live workers\n"
    worker = start_worker_process("--concurrency", "3")

    listed = wait_until(lambda: json_of(venturi_cli("workers", "--json"))["workers"], timeout=30)
    (entry,) = listed
    assert entry["id"] == entry["claimed_by"] == worker.registry_id
    assert entry["kinds"] == ["registry.served"]
    assert (entry["concurrency"], entry["running"]) == (3, 0)
    assert entry["version"] == succeeded(venturi_cli("--version")).split()[-1]
    assert entry["started_at"] <= entry["heartbeat_at"] < entry["expires_at"]
    table = succeeded(venturi_cli("workers")).splitlines()
    assert table[0].split() == [
        "ID",
        "VERSION",
        "CONCURRENCY",
        "RUNNING",
        "STARTED",
        "HEARTBEAT",
        "KINDS",
    ]
    assert len(table) == 2
    assert table[1].split()[0] == worker.registry_id
    assert table[1].split()[-1] == "registry.served"

    assert worker.stop() == 0
    assert succeeded(venturi_cli("workers")) == "no live workers\n"
    assert orjson.loads(succeeded(venturi_cli("workers", "--json"))) == {"workers": []}


@pytest.mark.slow
def test_venturi_stats_warns_about_kinds_with_due_jobs_that_no_live_worker_serves(
    venturi_cli: Run,
    app: venturi.App,
    orphan: Any,
    start_worker_process: Callable[..., WorkerProcess],
) -> None:
    due = orphan.delay(1)
    orphan.apply_async(args=(2,), countdown=3600)

    table = venturi_cli("stats")
    assert succeeded(table).splitlines()[1].split()[0] == "registry.orphan"
    assert table.stderr == (
        "venturi: warning: no live worker serves these kinds, whose due jobs wait: "
        "registry.orphan\n"
    )
    as_json = venturi_cli("stats", "--json")
    assert json_of(as_json)["unserved_kinds"] == ["registry.orphan"]
    assert as_json.stderr == table.stderr

    worker = start_worker_process()
    wait_until(lambda: json_of(venturi_cli("workers", "--json"))["workers"], timeout=30)
    # Still unserved: the live worker does not know the kind.
    assert json_of(venturi_cli("stats", "--json"))["unserved_kinds"] == ["registry.orphan"]
    assert worker.stop() == 0

    # Only the scheduled job is left: nothing waits yet, so no warning.
    app.cancel(due.id)
    quiet = venturi_cli("stats")
    assert "registry.orphan" in succeeded(quiet)
    assert quiet.stderr == ""
    assert json_of(venturi_cli("stats", "--json"))["unserved_kinds"] == []


def test_a_worker_logs_a_warning_about_a_kind_with_due_jobs_that_no_live_worker_serves(
    orphan: Any, start_worker_process: Callable[..., WorkerProcess]
) -> None:
    orphan.delay(1)
    worker = start_worker_process()

    wait_until(lambda: "has due jobs but no live worker serves it" in worker.log(), timeout=30)
    warnings = [line for line in worker.log().splitlines() if "no live worker serves it" in line]
    assert len(warnings) == 1
    assert "WARNING venturi.runtime.registration: kind 'registry.orphan'" in warnings[0]
    assert worker.stop() == 0
