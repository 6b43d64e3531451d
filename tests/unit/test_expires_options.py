"""``expires`` without a database (SPEC 6.6, ADR 0135): what a call's expiry and a task's
default become on the ``NewJob``, what is refused, a beat tick's expiry, and eager mode,
which ends a job that would expire before it is due ``dead``, note ``expired``, unrun."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from support import UNREACHABLE

import venturi
from venturi.errors import ConfigurationError, InvalidDelay, JobFailed
from venturi.options import TaskOptions
from venturi.schedule import Schedule
from venturi.testing import eager
from venturi.types import NewJob, OutcomeKind

AT = datetime(2031, 6, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def app() -> Iterator[venturi.App]:
    instance = venturi.App(UNREACHABLE, prefix="t_expires", set_as_current=False)
    yield instance
    instance.close()


def expiry(job: NewJob) -> tuple[timedelta | None, datetime | None]:
    return job.expires_in, job.expires_at


def test_a_calls_expiry_is_a_time_or_an_interval_from_the_call(app: venturi.App) -> None:
    @app.task(kind="expires.call")
    def work() -> None: ...

    assert expiry(work.new_job(expires=AT)) == (None, AT)
    assert expiry(work.new_job(expires=30)) == (timedelta(seconds=30), None)
    assert expiry(work.new_job(expires=0.25)) == (timedelta(milliseconds=250), None)
    # From the call, as Celery counts it: a countdown longer than the expiry dooms the job.
    assert expiry(work.new_job(countdown=60, expires=timedelta(seconds=30))) == (
        timedelta(seconds=30),
        None,
    )
    assert expiry(work.new_job()) == (None, None)


def test_a_task_default_counts_from_when_the_job_is_due(app: venturi.App) -> None:
    @app.task(kind="expires.default", expires=300)
    def work() -> None: ...

    assert work.options.expires == timedelta(minutes=5)
    assert expiry(work.new_job()) == (timedelta(minutes=5), None)
    assert expiry(work.new_job(countdown=60)) == (timedelta(minutes=6), None)
    assert expiry(work.new_job(eta=AT)) == (None, AT + timedelta(minutes=5))
    assert expiry(work.new_job(countdown=60, expires=10)) == (timedelta(seconds=10), None)


def test_a_beat_tick_expires_after_its_tick_not_after_its_enqueue(app: venturi.App) -> None:
    @app.task(kind="expires.nightly", expires=timedelta(minutes=10))
    def nightly() -> None: ...

    tick = datetime(2031, 6, 2, 3, 0, tzinfo=UTC)
    job = Schedule.declare("0 3 * * *", nightly).new_job(eta=tick)

    assert expiry(job) == (None, tick + timedelta(minutes=10))


BAD_CALLS = [
    0,
    -1,
    0.0,
    timedelta(0),
    timedelta(seconds=-1),
    float("nan"),
    float("inf"),
    True,
    "soon",
    datetime(2031, 1, 1),
    timedelta(days=10**8),
]


@pytest.mark.parametrize("value", BAD_CALLS, ids=[repr(v) for v in BAD_CALLS])
def test_a_bad_expiry_is_refused_with_invalid_delay(app: venturi.App, value: object) -> None:
    @app.task(kind="expires.bad")
    def work() -> None: ...

    with pytest.raises(InvalidDelay, match="expires"):
        work.new_job(expires=value)  # type: ignore[arg-type]


BAD_DEFAULTS = [0, -5, timedelta(0), "5m", AT, float("nan"), timedelta(days=10**8)]


@pytest.mark.parametrize("value", BAD_DEFAULTS, ids=[repr(v) for v in BAD_DEFAULTS])
def test_a_bad_default_is_refused_at_decoration(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"expires (must|reaches)"):
        TaskOptions.parse(expires=value)


def test_eager_ends_a_job_that_would_expire_before_it_is_due_dead_without_running_it(
    app: venturi.App,
) -> None:
    ran: list[int] = []

    @app.task(kind="expires.eager")
    def work(n: int) -> int:
        ran.append(n)
        return n

    @app.task(kind="expires.eager_default", expires=timedelta(minutes=1))
    def later(n: int) -> int:
        ran.append(n)
        return n

    with eager(app) as session:
        doomed = work.apply_async((1,), countdown=60, expires=30)
        past = work.apply_async((2,), expires=datetime.now(UTC) - timedelta(seconds=1))
        in_time = work.apply_async((3,), countdown=30, expires=60)
        plain = work.apply_async((4,), expires=5)
        tomorrow = later.apply_async((5,), eta=datetime.now(UTC) + timedelta(days=1))

    assert ran == [3, 4, 5]
    for ref in (doomed, past):
        outcome = session.outcome_of(ref)
        assert (outcome.kind, outcome.note, outcome.is_failure) == (
            OutcomeKind.DEAD,
            "expired",
            False,
        )
        with pytest.raises(JobFailed, match="expired"):
            ref.result()
    assert [ref.result() for ref in (in_time, plain, tomorrow)] == [3, 4, 5]
    assert [run.run_count for run in session.runs] == [1] * 5
