"""Retry delays (ADR 13): exponential, equal jitter, capped; pure and deterministic under test."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venturi.backoff import DEFAULT_CAP, Exponential, Fixed, exponential_backoff
from venturi.options import TaskOptions
from venturi.registry import Registry
from venturi.task import Task, TaskDecorator


def test_first_failure_waits_between_half_a_second_and_a_second() -> None:
    assert exponential_backoff(1, rand=lambda: 0.0) == timedelta(seconds=0.5)
    assert exponential_backoff(1, rand=lambda: 0.5) == timedelta(seconds=0.75)


def test_nominal_delay_doubles_with_each_failure() -> None:
    delays = [exponential_backoff(n, rand=lambda: 1.0) for n in range(1, 6)]
    assert delays == [timedelta(seconds=s) for s in (1, 2, 4, 8, 16)]


def test_delay_is_capped_at_one_hour_by_default() -> None:
    assert exponential_backoff(13, rand=lambda: 1.0) == DEFAULT_CAP == timedelta(hours=1)
    assert exponential_backoff(13, rand=lambda: 0.0) == timedelta(minutes=30)


def test_huge_failure_counts_stay_at_the_cap() -> None:
    assert exponential_backoff(10**9, rand=lambda: 1.0) == DEFAULT_CAP


def test_there_is_no_backoff_before_a_first_failure() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        exponential_backoff(0)


@settings(deadline=None)  # no timing: the machine may be busy
@given(
    st.integers(min_value=1, max_value=200),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_equal_jitter_keeps_at_least_half_the_nominal_delay_and_never_shrinks(
    failures: int, r: float
) -> None:
    nominal = timedelta(seconds=min(3600.0, 2.0 ** min(failures - 1, 64)))
    delay = exponential_backoff(failures, rand=lambda: r)
    assert nominal / 2 <= delay <= nominal
    assert exponential_backoff(failures + 1, rand=lambda: r) >= delay


def test_exponential_can_be_configured() -> None:
    backoff = Exponential(base=timedelta(seconds=10), cap=timedelta(seconds=30), rand=lambda: 1.0)
    assert [backoff(n) for n in (1, 2, 3)] == [timedelta(seconds=s) for s in (10, 20, 30)]


@pytest.mark.parametrize(
    ("base", "cap"),
    [(timedelta(0), timedelta(1)), (timedelta(seconds=10), timedelta(seconds=5))],
)
def test_exponential_refuses_a_base_that_is_not_positive_or_above_the_cap(
    base: timedelta, cap: timedelta
) -> None:
    with pytest.raises(ValueError, match="base"):
        Exponential(base=base, cap=cap)


def handler(n: int) -> None: ...


def task_with(**options: object) -> Task[..., None]:
    return TaskDecorator(TaskOptions.parse(**options), registry=Registry())(handler)


def test_fixed_waits_the_same_delay_after_every_failure() -> None:
    fixed = Fixed(timedelta(seconds=3))
    assert fixed(1) == fixed(50) == timedelta(seconds=3)


def test_a_task_uses_the_default_exponential_backoff() -> None:
    delay = task_with().backoff(3)
    assert timedelta(seconds=2) <= delay <= timedelta(seconds=4)


@pytest.mark.parametrize("fixed", [timedelta(seconds=7), 7, 7.0])
def test_a_task_can_declare_a_fixed_backoff(fixed: object) -> None:
    task = task_with(backoff=fixed)
    assert task.backoff(1) == task.backoff(9) == timedelta(seconds=7)


def test_a_task_can_declare_its_own_backoff_function() -> None:
    task = task_with(backoff=lambda n: timedelta(minutes=n))
    assert task.backoff(3) == timedelta(minutes=3)


def test_a_task_can_declare_a_configured_exponential_backoff() -> None:
    task = task_with(backoff=Exponential(base=timedelta(seconds=5), rand=lambda: 1.0))
    assert task.backoff(2) == timedelta(seconds=10)


def raising(n: int) -> timedelta:
    raise RuntimeError("bug in backoff")


@pytest.mark.parametrize(
    "broken", [raising, lambda n: "soon", lambda n: timedelta(seconds=-1)], ids=str
)
def test_a_broken_backoff_function_falls_back_to_the_default_and_says_so(
    broken: object, caplog: pytest.LogCaptureFixture
) -> None:
    task = task_with(backoff=broken)
    with caplog.at_level(logging.WARNING, logger="venturi.task"):
        delay = task.backoff(1)
    assert timedelta(seconds=0.5) <= delay <= timedelta(seconds=1)
    assert "backoff of" in caplog.text
