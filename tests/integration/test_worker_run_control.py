"""Run control through a real threaded Worker (ADR 0121): stored tracebacks, time
limits and cancellation of running jobs, read back with plain SQL, ``app.job`` and the
``venturi`` command line.

Handlers that must outlive a limit block on an ``Event`` the test sets at the end, so
no test sleeps to synchronise; the worker's own deadlines are what is being tested.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
from support import entries, row, status_is, wait_until

import venturi
from venturi.context import Context
from venturi.runtime.executor import MAX_TRACEBACK_CHARS
from venturi.runtime.runner import Runner
from venturi.types import Status
from venturi.worker import Worker

#: Renewals (and so cancellation requests) every 0.2 s.
SHORT_LEASE = timedelta(seconds=0.6)


def venturi_cli(database_url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env["VENTURI_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "venturi", *args, "--prefix", prefix],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets blocked handlers return; set after the test so no thread outlives it long."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def discarded(caplog: pytest.LogCaptureFixture) -> Callable[[str], bool]:
    """Whether the worker logged that a job's late outcome was discarded."""
    caplog.set_level(logging.WARNING, logger="venturi.worker")

    def seen(job_id: str) -> bool:
        return any(
            job_id in r.getMessage() and "outcome was discarded" in r.getMessage()
            for r in caplog.records
        )

    return seen


# -- tracebacks ---------------------------------------------------------------------------


def test_a_failed_runs_traceback_is_stored_and_shown_by_jobs_show(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker], database_url: str, prefix: str
) -> None:
    @app.task(kind="rc.fails", backoff=timedelta(hours=1))
    def fails(n: int) -> None:
        raise ValueError(f"bad input {n}")

    ref = fails.delay(7)
    start_worker()
    wait_until(lambda: entries(db, ref.id))

    [entry] = app.job(ref.id).journal
    assert (entry.outcome.value, entry.note) == ("retried", "ValueError: bad input 7")
    assert entry.traceback is not None
    assert entry.traceback.startswith("Traceback (most recent call last):\n")
    assert 'raise ValueError(f"bad input {n}")' in entry.traceback
    assert entry.traceback.endswith("ValueError: bad input 7\n")
    assert db.journal(ref.id)[0]["traceback"] == entry.traceback

    shown = venturi_cli(database_url, prefix, "jobs", "show", ref.id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    header = lines.index(f"traceback of entry {entry.id} (run 1, retried):")
    assert lines[header + 1] == "  Traceback (most recent call last):"
    assert lines[-1] == "  ValueError: bad input 7"
    as_json = venturi_cli(database_url, prefix, "jobs", "show", ref.id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert orjson.loads(as_json.stdout)["journal"][0]["traceback"] == entry.traceback


def test_a_deep_traceback_is_bounded_keeping_the_innermost_frames(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    # Two functions in turn, so Python does not fold the frames into "repeated N times".
    def down(n: int) -> None:
        if n == 0:
            raise RuntimeError("the bottom")
        across(n - 1)

    def across(n: int) -> None:
        down(n)

    @app.task(kind="rc.deep", max_failures=1)
    def deep(depth: int) -> None:
        down(depth)

    ref = deep.delay(300)
    start_worker()
    wait_until(status_is(db, ref.id, "dead"))

    [entry] = app.job(ref.id).journal
    text = entry.traceback
    assert text is not None
    assert len(text) <= MAX_TRACEBACK_CHARS
    assert text.startswith("Traceback (most recent call last):\n  ... (")
    assert "characters of outer frames omitted)\n" in text
    assert text.endswith("RuntimeError: the bottom\n")
    assert 'raise RuntimeError("the bottom")' in text  # the innermost frame
    assert "in deep\n" not in text  # the outermost handler frame was cut


# -- time limits --------------------------------------------------------------------------


def test_a_run_past_its_time_limit_is_retried_and_its_late_outcome_discarded(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    release: threading.Event,
    discarded: Callable[[str], bool],
) -> None:
    @app.task(kind="rc.slow", time_limit=timedelta(seconds=0.3), backoff=timedelta(hours=1))
    def slow() -> str:
        release.wait(30)
        return "late"

    @app.task(kind="rc.quick")
    def quick() -> str:
        return "quick"

    hung = slow.delay()
    start_worker(concurrency=1)
    wait_until(lambda: entries(db, hung.id))

    assert entries(db, hung.id) == [("retried", 1, "time limit exceeded")]
    job = row(db, hung.id)
    assert (job["status"], job["failure_count"], job["claimed_by"]) == ("pending", 1, None)
    # The one slot came back while the handler is still blocked.
    served = quick.delay()
    wait_until(status_is(db, served.id, "completed"))
    assert not release.is_set()

    release.set()
    wait_until(lambda: discarded(hung.id))
    assert entries(db, hung.id) == [("retried", 1, "time limit exceeded")]


def test_a_run_past_its_time_limit_at_the_backstop_is_dead(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker], release: threading.Event
) -> None:
    @app.task(kind="rc.slow.last", time_limit=0.2, max_failures=1)
    def slow() -> None:
        release.wait(30)

    ref = slow.delay()
    start_worker()
    wait_until(status_is(db, ref.id, "dead"))

    assert entries(db, ref.id) == [
        ("dead", 1, "backstop reached after 1 failures (max_failures=1): time limit exceeded")
    ]


def test_abandoned_handler_threads_are_replaced_up_to_the_concurrency_then_claims_stop(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    release: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="venturi.worker")

    @app.task(kind="rc.hangs", time_limit=0.2, backoff=timedelta(hours=1))
    def hangs() -> None:
        release.wait(30)

    @app.task(kind="rc.after")
    def after() -> str:
        return "ran"

    first = hangs.delay()
    start_worker(concurrency=1)
    wait_until(lambda: entries(db, first.id))
    second = hangs.delay()  # runs on the replacement thread, and hangs too
    wait_until(lambda: entries(db, second.id))
    waiting = after.delay()  # no third thread: the slot stays taken

    endings = [r.getMessage() for r in caplog.records if "ended by the worker" in r.getMessage()]
    assert [m.rsplit("(", 1)[1] for m in endings] == [
        "1 abandoned, 0 of them without a replacement)",
        "2 abandoned, 1 of them without a replacement)",
    ]
    # An observation window, not a synchronisation: a free slot would claim at once
    # (the enqueue's NOTIFY wakes the worker).
    threading.Event().wait(1.5)
    assert row(db, waiting.id)["status"] == "pending"
    release.set()
    wait_until(status_is(db, waiting.id, "completed"))


def test_the_lease_keeper_stops_renewing_a_claim_past_its_deadline(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="rc.kept", lease=timedelta(seconds=30))
    def kept() -> None: ...

    ref = kept.delay()
    runner = Runner(
        app.backend,
        app.tasks(),
        kinds=["rc.kept"],
        worker_id="rc-host:1",
        result_max_bytes=app.result_max_bytes,
    )
    [job] = app.backend.claim(
        kinds=["rc.kept"], limit=1, worker_id="rc-host:1", lease=timedelta(seconds=1)
    )
    keeper = runner.lease_keeper(recovery_interval=1.0)
    keeper.hold([job])
    keeper.renew_once()
    renewed = row(db, ref.id)["claim_expires_at"]
    assert renewed > job.claim_expires_at

    keeper.set_deadline(ref.id, time.monotonic() - 0.01)
    keeper.renew_once()

    assert row(db, ref.id)["claim_expires_at"] == renewed
    assert keeper.held() == []


# -- cancellation -------------------------------------------------------------------------


def test_a_cooperative_running_job_cancelled_ends_dead_and_can_be_retried(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    started = threading.Event()
    pause = threading.Event()

    @app.task(kind="rc.coop", lease=SHORT_LEASE)
    def coop(ctx: Context) -> str:
        if ctx.run_count > 1:
            return "second run, not cancelled"
        started.set()
        deadline = time.monotonic() + 30
        while not ctx.is_cancelled() and time.monotonic() < deadline:
            pause.wait(0.01)
        ctx.raise_if_cancelled()
        return "never cancelled"

    ref = coop.delay()
    start_worker()
    assert started.wait(10)

    requested = app.cancel(ref.id)

    assert requested.status is Status.CLAIMED
    assert requested.cancel_requested_at is not None
    wait_until(status_is(db, ref.id, "dead"))
    assert entries(db, ref.id) == [("dead", 1, "cancelled")]
    assert row(db, ref.id)["failure_count"] == 0

    retried = app.retry(ref.id)
    assert retried.cancel_requested_at is None
    wait_until(status_is(db, ref.id, "completed"))
    assert entries(db, ref.id)[-1] == ("completed", 2, "second run, not cancelled")


def test_a_running_job_that_ignores_its_cancellation_is_ended_by_the_worker(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    release: threading.Event,
    discarded: Callable[[str], bool],
) -> None:
    started = threading.Event()

    @app.task(kind="rc.stubborn", lease=SHORT_LEASE)
    def stubborn() -> str:
        started.set()
        release.wait(30)
        return "finished anyway"

    @app.task(kind="rc.next")
    def next_job() -> str:
        return "served"

    ref = stubborn.delay()
    start_worker(concurrency=1)
    assert started.wait(10)

    app.cancel(ref.id)

    wait_until(status_is(db, ref.id, "dead"))
    assert entries(db, ref.id) == [("dead", 1, "cancelled")]
    served = next_job.delay()
    wait_until(status_is(db, served.id, "completed"))
    release.set()
    wait_until(lambda: discarded(ref.id))
    assert entries(db, ref.id) == [("dead", 1, "cancelled")]


def test_cancelling_a_pending_job_still_ends_it_at_once(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="rc.later")
    def later() -> None: ...

    ref = later.apply_async(countdown=3600)

    job = app.cancel(ref.id)

    assert job.status is Status.DEAD
    assert entries(db, ref.id) == [("dead", 0, "cancelled")]


def test_jobs_cancel_on_the_command_line_cancels_a_running_job(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    database_url: str,
    prefix: str,
) -> None:
    started = threading.Event()
    pause = threading.Event()

    @app.task(kind="rc.cli", lease=SHORT_LEASE)
    def loops(ctx: Context) -> None:
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            pause.wait(0.01)

    ref = loops.delay()
    start_worker()
    assert started.wait(10)

    result = venturi_cli(database_url, prefix, "jobs", "cancel", ref.id)

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"job {ref.id} is running: cancellation requested (it ends dead, 'cancelled')\n"
    )
    requested = db.one("SELECT cancel_requested_at FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
    assert requested["cancel_requested_at"] is not None
    wait_until(status_is(db, ref.id, "dead"))
    assert entries(db, ref.id) == [("dead", 1, "cancelled")]
