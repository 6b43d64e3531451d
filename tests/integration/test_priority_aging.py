"""Priority aging (App(age_after=)): a LOW job under a continuous stream of HIGH work
starts after about age_after, and without age_after it waits for the stream to end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import venturi
from venturi.errors import ConfigurationError
from venturi.types import Priority
from venturi.worker import Worker

AGE_AFTER = 1.0


@pytest.fixture
def aging_app(database_url: str, prefix: str, app: venturi.App) -> Iterator[venturi.App]:
    instance = venturi.App(
        database_url, prefix=prefix, set_as_current=False, age_after=timedelta(seconds=AGE_AFTER)
    )
    yield instance
    instance.close()


def _stream(target: venturi.App, started: dict[str, float]) -> tuple[Any, Any]:
    @target.task(kind="aging.high", priority=Priority.HIGH)
    def high(n: int) -> None:
        time.sleep(0.01)

    @target.task(kind="aging.low", priority=Priority.LOW)
    def low() -> None:
        started["low"] = time.monotonic()

    return high, low


def _run_under_a_high_stream(
    target: venturi.App, start_worker: Callable[..., Worker], seconds: float
) -> float | None:
    """Seconds from the LOW job's enqueue to its start, or None if it did not start."""
    started: dict[str, float] = {}
    high, low = _stream(target, started)
    high.delay_many([{"n": n} for n in range(100)])
    stop = threading.Event()

    def feed() -> None:
        n = 100
        while not stop.is_set():
            high.delay_many([{"n": n + i} for i in range(20)])
            n += 20
            stop.wait(0.1)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        enqueued = time.monotonic()
        low.delay()
        start_worker(target, concurrency=1, prefetch=0)
        deadline = time.monotonic() + seconds
        while "low" not in started and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        feeder.join(5)
    return started["low"] - enqueued if "low" in started else None


def test_a_low_job_under_a_stream_of_high_work_starts_after_about_age_after(
    aging_app: venturi.App, start_worker: Callable[..., Worker]
) -> None:
    waited = _run_under_a_high_stream(aging_app, start_worker, seconds=15)
    assert waited is not None
    assert AGE_AFTER * 0.9 <= waited <= AGE_AFTER * 3, waited


def test_without_age_after_the_stream_keeps_the_low_job_waiting(
    app: venturi.App, start_worker: Callable[..., Worker]
) -> None:
    assert _run_under_a_high_stream(app, start_worker, seconds=AGE_AFTER * 3) is None


@pytest.mark.parametrize("value", [0, -1, timedelta(0), "1s"])
def test_age_after_must_be_positive(value: object, database_url: str) -> None:
    with pytest.raises(ConfigurationError, match="age_after must be a positive timedelta"):
        venturi.App(database_url, set_as_current=False, age_after=value)  # type: ignore[arg-type]
