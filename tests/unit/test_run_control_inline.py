"""Run control without a database (ADR 0121): the ``time_limit`` option, and how
``perform`` maps time limits, cancellation signals and tracebacks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from venturi.context import Cancelled, Context
from venturi.errors import ConfigurationError, Fail, Retry
from venturi.options import TaskOptions
from venturi.registry import Registry
from venturi.runtime.executor import MAX_TRACEBACK_CHARS
from venturi.task import Task, TaskDecorator
from venturi.testing import perform
from venturi.types import OutcomeKind


def build(fn: Callable[..., Any], **options: Any) -> Task[..., Any]:
    return TaskDecorator(TaskOptions.parse(**options), registry=Registry())(fn)


def idle() -> None: ...


# -- the option ---------------------------------------------------------------------------


def test_time_limit_takes_a_timedelta_or_seconds_and_defaults_to_none() -> None:
    assert build(idle).options.time_limit is None
    assert build(idle, time_limit=timedelta(minutes=5)).options.time_limit == timedelta(minutes=5)
    assert build(idle, time_limit=2.5).options.time_limit == timedelta(seconds=2.5)


@pytest.mark.parametrize("value", [0, -1, timedelta(0), timedelta(seconds=-3), "10", True])
def test_a_time_limit_that_is_not_a_positive_duration_is_refused(value: object) -> None:
    with pytest.raises(ConfigurationError, match="time_limit must be a positive timedelta"):
        TaskOptions.parse(time_limit=value)


# -- perform ------------------------------------------------------------------------------


def test_a_run_that_returns_after_its_time_limit_gets_the_time_limit_outcome() -> None:
    def slow() -> str:
        threading.Event().wait(0.1)
        return "done, too late"

    outcome = perform(build(slow, time_limit=0.01, backoff=timedelta(seconds=7)))

    assert (outcome.kind, outcome.note, outcome.is_failure, outcome.delay) == (
        OutcomeKind.RETRIED,
        "time limit exceeded",
        True,
        timedelta(seconds=7),
    )
    last = perform(build(slow, time_limit=0.01, max_failures=1))
    assert (last.kind, last.note) == (
        OutcomeKind.DEAD,
        "backstop reached after 1 failures (max_failures=1): time limit exceeded",
    )


def test_outside_a_worker_nothing_is_cancelled_and_the_signal_ends_the_run_dead() -> None:
    def checks(ctx: Context) -> bool:
        ctx.raise_if_cancelled()
        return ctx.is_cancelled()

    def signals() -> None:
        raise Cancelled

    assert perform(build(checks)).note == "false"
    cancelled = perform(build(signals))
    assert (cancelled.kind, cancelled.note, cancelled.is_failure, cancelled.traceback) == (
        OutcomeKind.DEAD,
        "cancelled",
        False,
        None,
    )


def test_an_exception_keeps_its_traceback_and_the_handler_signals_do_not() -> None:
    def broken() -> None:
        {}["missing"]

    def fails() -> None:
        raise Fail("no")

    def retries() -> None:
        raise Retry(delay=timedelta(seconds=1))

    outcome = perform(build(broken))
    assert outcome.traceback is not None
    assert outcome.traceback.endswith("KeyError: 'missing'\n")
    assert "in broken" in outcome.traceback
    assert perform(build(fails)).traceback is None
    assert perform(build(retries)).traceback is None


def test_a_traceback_of_a_huge_message_is_still_bounded() -> None:
    def shouts() -> None:
        raise ValueError("x" * (3 * MAX_TRACEBACK_CHARS))

    text = perform(build(shouts)).traceback

    assert text is not None
    assert len(text) <= MAX_TRACEBACK_CHARS
    assert text.endswith("xxx\n")
    assert "characters of outer frames omitted" in text


def test_a_traceback_with_a_nul_character_is_made_storable() -> None:
    def nul() -> None:
        raise ValueError("a\x00b")

    text = perform(build(nul)).traceback

    assert text is not None
    assert "\x00" not in text
    assert text.endswith("ValueError: a\\x00b\n")
