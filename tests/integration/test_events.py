"""Events at the boundary (ADR 0127): a subscriber sees a job's whole life, in order, and
can neither break nor change a run."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from support import wait_until

import venturi
from venturi.events import (
    BeatTicked,
    Event,
    JobClaimed,
    JobEnqueued,
    JobMerged,
    JobsRecovered,
    RunEnded,
    RunStarted,
    WorkerStarted,
    WorkerStopped,
)
from venturi.types import OutcomeKind, Status
from venturi.worker import Worker


class Recorder:
    """A thread-safe list of the events it was given."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, job_id: str) -> list[Event]:
        with self._lock:
            return [e for e in self.events if getattr(e, "job_id", None) == job_id]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_subscriber_sees_every_event_of_a_jobs_life_in_order(
    app: venturi.App, start_worker: Callable[..., Worker], is_async: bool
) -> None:
    """Async handlers' runs (on the worker's event loop) are observed exactly as sync ones."""
    attempts: list[int] = []
    kind = "ev.async_flaky" if is_async else "ev.flaky"

    def run(n: int) -> int:
        attempts.append(n)
        if len(attempts) == 1:
            raise ValueError("first run fails")
        return n

    async def arun(n: int) -> int:
        return run(n)

    flaky = app.task(kind=kind, backoff=0)(arun if is_async else run)
    recorder = Recorder()
    app.events.subscribe(recorder)
    ref = flaky.delay(7)
    worker = start_worker(concurrency=2)
    wait_until(lambda: app.job(ref.id).job.status is Status.COMPLETED)
    worker.stop(grace=5)

    life = recorder.of(ref.id)
    assert [type(e) for e in life] == [
        JobEnqueued,
        JobClaimed,
        RunStarted,
        RunEnded,
        JobClaimed,
        RunStarted,
        RunEnded,
    ]
    assert [getattr(e, "run", None) for e in life] == [None, 1, 1, 1, 2, 2, 2]
    first, second = (e for e in life if isinstance(e, RunEnded))
    assert first.outcome is OutcomeKind.RETRIED and first.is_failure
    assert first.note == "ValueError: first run fails"
    assert first.traceback is not None and "ValueError: first run fails" in first.traceback
    assert second.outcome is OutcomeKind.COMPLETED and not second.is_failure
    assert second.duration >= 0
    assert all(e.kind == kind for e in life if hasattr(e, "kind"))
    times = [e.at for e in life]
    assert times == sorted(times)
    lifecycle = [e for e in recorder.events if isinstance(e, WorkerStarted | WorkerStopped)]
    assert [type(e) for e in lifecycle] == [WorkerStarted, WorkerStopped]
    assert lifecycle[0].worker_id == worker.worker_id
    assert lifecycle[0].kinds == worker.kinds


def test_a_raising_subscriber_changes_no_outcome_and_is_logged_once(
    app: venturi.App, start_worker: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(kind="ev.ok")
    def ok(n: int) -> int:
        return n

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    subscription = app.events.subscribe(broken)
    recorder = Recorder()
    app.events.subscribe(recorder)
    with caplog.at_level(logging.ERROR, logger="venturi.events"):
        refs = ok.delay_many([[n] for n in range(5)])
        start_worker()
        wait_until(lambda: all(app.job(r.id).job.status is Status.COMPLETED for r in refs))
    assert all(app.job(r.id).journal[-1].outcome is OutcomeKind.COMPLETED for r in refs)
    # The later subscriber still got every event.
    assert sum(isinstance(e, RunEnded) for e in recorder.events) == 5
    logged = [r for r in caplog.records if "subscriber bug" in (r.exc_text or "")]
    assert len(logged) == 1
    assert subscription.errors >= 5 + 5 * 3  # enqueued, and claimed/started/ended per run


def test_filters_unsubscribing_and_a_slow_subscriber_warning(
    app: venturi.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(kind="ev.a", dedup=lambda n: f"{n}")
    def a(n: int) -> None: ...

    @app.task(kind="ev.b")
    def b(n: int) -> None: ...

    only_b = Recorder()
    merges = Recorder()
    app.events.subscribe(only_b, kinds=["ev.b"])
    app.events.subscribe(merges, types=[JobMerged])

    def slow(event: Event) -> None:
        time.sleep(0.06)

    slow_handle = app.events.subscribe(slow)
    with caplog.at_level(logging.WARNING, logger="venturi.events"):
        first = a.delay(1)
        second = a.delay(1)
        b.delay(2)
    assert [type(e) for e in only_b.events] == [JobEnqueued]
    assert [(e.job_id, e.absorbed_id) for e in merges.events if isinstance(e, JobMerged)] == [
        (first.id, merges.events[0].absorbed_id)
    ]
    assert second.merged and second.id == first.id
    assert sum("must be fast" in r.getMessage() for r in caplog.records) == 1
    slow_handle()
    only_b.events.clear()
    b.delay(3)
    assert len(only_b.events) == 1
    assert app.events.active
    for subscription in list(app.events._subscriptions):
        subscription.unsubscribe()
    assert not app.events.active


def test_recovery_and_beat_ticks_are_events(app: venturi.App) -> None:
    from venturi.beat import Beat

    @app.task(kind="ev.lease", lease=timedelta(seconds=1))
    def leased() -> None: ...

    @app.task(kind="ev.tick", schedule="* * * * *")
    def tick() -> None: ...

    recorder = Recorder()
    app.events.subscribe(recorder)
    leased.delay()
    worker = Worker(app, kinds=["ev.lease"], recovery_interval=1.0)
    runner = worker._run_path()
    request = runner.plan.request(free=1, running={}, is_renewed=False)
    assert request is not None
    assert len(runner.claim(request)) == 1
    time.sleep(1.2)
    assert runner.lease_keeper(recovery_interval=1.0).recover_once() == 1
    [recovered] = [e for e in recorder.events if isinstance(e, JobsRecovered)]
    assert recovered.count == 1

    [ref] = Beat(app).run_once()
    [ticked] = [e for e in recorder.events if isinstance(e, BeatTicked)]
    assert (ticked.job_id, ticked.kind, ticked.schedule, ticked.merged) == (
        ref.id,
        "ev.tick",
        "ev.tick",
        False,
    )
