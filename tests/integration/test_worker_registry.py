"""Workers are visible (ADR 0119): in-process Workers in the registry, through the public API.

Entries appear when a Worker starts, carry what it serves and how busy it is,
and vanish when it stops; several Workers in one process get ids of their
own; a dead worker's entry is ignored once expired and swept by a live one;
kinds with due work and no live worker are reported and warned about.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from support import Database, wait_until

import venturi
from venturi.runtime.registration import Registration
from venturi.types import WorkerInfo, WorkerRegistration
from venturi.worker import Worker

#: Short leases: heartbeats every 0.33 s, entries expire 2 s after the last one.
LEASE = timedelta(seconds=1)
HOST_PID = f"{socket.gethostname()}:{os.getpid()}"


@pytest.fixture(autouse=True)
def empty_registry(db: Database) -> None:
    db.execute("TRUNCATE {{prefix}}_workers")


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Handlers of ``reg.block`` wait on it; set at teardown so no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def tasks(app: venturi.App, gate: threading.Event) -> dict[str, venturi.Task[..., object]]:
    @app.task(kind="reg.block", lease=LEASE)
    def block(n: int) -> int:
        gate.wait(10)
        return n

    @app.task(kind="reg.quick", lease=LEASE)
    def quick(n: int) -> int:
        return n

    return {"block": block, "quick": quick}


def entries(app: venturi.App) -> dict[str, WorkerInfo]:
    return {info.id: info for info in app.workers()}


def logged(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], list[str]]:
    return lambda: [r.getMessage() for r in list(caplog.records) if text in r.getMessage()]


def test_a_started_worker_is_listed_with_what_it_serves_and_vanishes_when_it_stops(
    app: venturi.App, tasks: dict[str, venturi.Task[..., object]], start_worker: Any
) -> None:
    worker: Worker = start_worker(concurrency=3, kinds=["reg.block", "reg.quick"])

    info = wait_until(lambda: entries(app).get(HOST_PID))
    assert worker.worker_id == HOST_PID == info.claimed_by
    assert info.kinds == ("reg.block", "reg.quick")
    assert info.concurrency == 3
    assert info.version == importlib.metadata.version("venturi")
    assert info.running == 0
    assert info.heartbeat_at >= info.started_at
    assert info.expires_at > app.backend.now()

    worker.stop(grace=1)
    assert entries(app) == {}


def test_the_heartbeat_reports_the_jobs_running_now(
    app: venturi.App,
    tasks: dict[str, venturi.Task[..., object]],
    start_worker: Any,
    gate: threading.Event,
) -> None:
    start_worker(concurrency=4, kinds=["reg.block"])
    for n in range(2):
        tasks["block"].delay(n)

    wait_until(lambda: entries(app).get(HOST_PID, None) and entries(app)[HOST_PID].running == 2)
    gate.set()
    wait_until(lambda: entries(app)[HOST_PID].running == 0)


def test_workers_of_one_process_get_ids_of_their_own_lowest_free_number_first(
    app: venturi.App, tasks: dict[str, venturi.Task[..., object]], start_worker: Any
) -> None:
    first: Worker = start_worker(kinds=["reg.quick"])
    start_worker(kinds=["reg.block"], concurrency=2)
    wait_until(lambda: len(entries(app)) == 2)
    assert {i: e.kinds for i, e in entries(app).items()} == {
        HOST_PID: ("reg.quick",),
        f"{HOST_PID}#2": ("reg.block",),
    }
    assert {e.claimed_by for e in app.workers()} == {HOST_PID}

    first.stop(grace=1)
    assert set(entries(app)) == {f"{HOST_PID}#2"}
    start_worker(kinds=["reg.quick", "reg.block"])
    wait_until(lambda: len(entries(app)) == 2)
    assert entries(app)[HOST_PID].kinds == ("reg.block", "reg.quick")


def test_a_dead_workers_entry_is_ignored_once_expired_and_swept_by_a_live_worker(
    app: venturi.App,
    tasks: dict[str, venturi.Task[..., object]],
    start_worker: Any,
    db: Database,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="venturi.runtime.registration")
    gone = WorkerRegistration("gone-host:4242", "0.0.1", ("reg.quick",), concurrency=8)
    app.backend.register_worker(gone, expires_in=timedelta(seconds=-1))
    assert "gone-host:4242" not in entries(app)
    assert db.scalar("SELECT count(*) FROM {{prefix}}_workers") == 1

    start_worker(kinds=["reg.quick"])

    wait_until(
        lambda: db.scalar("SELECT count(*) FROM {{prefix}}_workers WHERE id = %s", (gone.id,)) == 0
    )
    assert set(entries(app)) == {HOST_PID}
    assert wait_until(logged(caplog, "gone-host:4242 stopped heartbeating"))


def test_kinds_with_due_jobs_and_no_live_worker_are_reported(
    app: venturi.App, tasks: dict[str, venturi.Task[..., object]], start_worker: Any
) -> None:
    tasks["quick"].apply_async(args=(1,), countdown=3600)
    tasks["block"].delay(1)
    assert app.unserved_kinds() == ["reg.block"]

    start_worker(kinds=["reg.block"])
    wait_until(lambda: HOST_PID in entries(app))
    assert app.unserved_kinds() == []


def test_a_worker_warns_about_an_unserved_kind_once_per_warning_interval(
    app: venturi.App, tasks: dict[str, venturi.Task[..., object]], caplog: pytest.LogCaptureFixture
) -> None:
    """The rate limit, driven one check at a time (STYLE R9)."""
    caplog.set_level(logging.WARNING, logger="venturi.runtime.registration")
    tasks["block"].delay(1)
    tasks["quick"].delay(1)
    registration = Registration(
        app.backend,
        claimed_by="checker:1",
        kinds=["reg.quick"],
        concurrency=1,
        interval=0.1,
        running=lambda: 0,
        warning_interval=3600,
    )
    try:
        registration.heartbeat_once()
        assert registration.check_unserved_once() == ["reg.block"]
        assert registration.check_unserved_once() == []
        assert len(logged(caplog, "'reg.block' has due jobs but no live worker serves it")()) == 1
    finally:
        registration.deregister()
    assert entries(app) == {}


def test_a_running_worker_warns_in_its_log_about_a_kind_nobody_serves(
    app: venturi.App,
    tasks: dict[str, venturi.Task[..., object]],
    start_worker: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="venturi.runtime.registration")
    tasks["block"].delay(1)

    start_worker(kinds=["reg.quick"])

    (message,) = wait_until(logged(caplog, "has due jobs but no live worker serves it"))
    assert "'reg.block'" in message
