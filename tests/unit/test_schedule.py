"""Schedules are validated when declared and describe Beat's rows exactly (no database)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import orjson
import pytest
from support import UNREACHABLE

import venturi
from venturi.beat import Beat
from venturi.errors import (
    ArgumentsMismatch,
    ConfigurationError,
    InvalidPayload,
    InvalidSchedule,
)
from venturi.merge import Merge
from venturi.schedule import Schedule
from venturi.types import MergeAction, MergeDecision


@pytest.fixture
def app() -> Iterator[venturi.App]:
    instance = venturi.App(UNREACHABLE, prefix="unit_schedule", set_as_current=False)
    yield instance
    instance.close()


def test_periodic_refuses_an_invalid_cron_expression_when_declared(app: venturi.App) -> None:
    @app.task(kind="unit.report")
    def report() -> None: ...

    with pytest.raises(InvalidSchedule, match="cron expression"):
        app.periodic("61 * * * *", report)
    assert app.schedules() == []


def test_periodic_refuses_an_unknown_time_zone_when_declared(app: venturi.App) -> None:
    @app.task(kind="unit.report")
    def report() -> None: ...

    with pytest.raises(InvalidSchedule, match="time zone"):
        app.periodic("0 3 * * *", report, timezone="Europe/Atlantis")
    assert app.schedules() == []


def test_task_schedule_is_refused_at_decoration_when_invalid(app: venturi.App) -> None:
    with pytest.raises(InvalidSchedule):

        @app.task(kind="unit.bad_cron", schedule="0 3 * *")
        def bad_cron() -> None: ...

    with pytest.raises(InvalidSchedule):

        @app.task(kind="unit.bad_zone", schedule="0 3 * * *", timezone="Paris")
        def bad_zone() -> None: ...


def test_a_task_schedule_is_named_after_its_kind_and_read_in_its_time_zone(
    app: venturi.App,
) -> None:
    @app.task(kind="reports.nightly", schedule="0 3 * * *", timezone="Europe/Paris")
    def nightly() -> None: ...

    [schedule] = app.schedules()
    assert (schedule.name, schedule.expression, schedule.timezone) == (
        "reports.nightly",
        "0 3 * * *",
        "Europe/Paris",
    )
    assert schedule.task is nightly
    assert (schedule.args, dict(schedule.kwargs), schedule.catch_up) == ((), {}, False)
    # 03:00 in Paris in winter is 02:00 UTC.
    assert schedule.next_tick(after=datetime(2026, 1, 10, tzinfo=UTC)) == datetime(
        2026, 1, 10, 2, 0, tzinfo=UTC
    )


def test_periodic_arguments_are_bound_and_encoded_when_declared(app: venturi.App) -> None:
    @app.task(kind="unit.greet")
    def greet(to: str) -> None: ...

    with pytest.raises(ArgumentsMismatch):
        app.periodic("0 * * * *", greet, kwargs={"too": "x"})
    with pytest.raises(InvalidPayload):
        app.periodic("0 * * * *", greet, args=({1, 2},))
    assert app.schedules() == []


def test_a_schedule_row_is_deduplicated_per_schedule_and_always_keeps_the_pending_one(
    app: venturi.App,
) -> None:
    @app.task(kind="unit.greet", merge=lambda existing, incoming: Merge.replace())
    def greet(to: str) -> None: ...

    schedule = app.periodic("0 * * * *", greet, args=("ops@example.org",), name="greet-ops")
    tick = datetime(2026, 1, 1, 10, tzinfo=UTC)
    job = schedule.new_job(eta=tick)

    assert (job.kind, job.eta, job.dedup_key) == ("unit.greet", tick, "beat:greet-ops")
    assert orjson.loads(job.payload) == {"to": "ops@example.org"}
    assert job.merge is not None
    # The task's own merge (replace) is not used: racing Beats keep the existing row.
    assert job.merge({"to": "someone-else"}) == MergeDecision(MergeAction.KEEP)


def test_schedule_keyword_arguments_are_a_read_only_copy(app: venturi.App) -> None:
    @app.task(kind="unit.greet")
    def greet(to: str) -> None: ...

    kwargs = {"to": "a@example.org"}
    schedule = app.periodic("0 * * * *", greet, kwargs=kwargs)
    kwargs["to"] = "changed@example.org"
    assert schedule.kwargs == {"to": "a@example.org"}
    with pytest.raises(TypeError):
        schedule.kwargs["to"] = "x"  # type: ignore[index]


@pytest.mark.parametrize("name", ["", "   ", "a\nb", "tab\there"])
def test_invalid_schedule_names_are_refused(app: venturi.App, name: str) -> None:
    @app.task(kind="unit.report")
    def report() -> None: ...

    with pytest.raises(InvalidSchedule, match="schedule name"):
        app.periodic("0 3 * * *", report, name=name)


def test_beat_refuses_an_app_that_declares_one_schedule_name_twice(app: venturi.App) -> None:
    @app.task(kind="unit.greet")
    def greet(to: str) -> None: ...

    app.periodic("0 * * * *", greet, args=("a",))
    app.periodic("30 * * * *", greet, args=("b",))
    with pytest.raises(InvalidSchedule, match=r"more than once: unit\.greet"):
        Beat(app)


def test_a_periodic_schedule_may_not_reuse_the_name_of_a_task_schedule(app: venturi.App) -> None:
    @app.task(kind="unit.nightly", schedule="0 3 * * *")
    def nightly() -> None: ...

    app.periodic("0 4 * * *", nightly)
    with pytest.raises(InvalidSchedule, match=r"unit\.nightly"):
        Beat(app)


def test_distinct_names_let_one_task_have_several_schedules(app: venturi.App) -> None:
    @app.task(kind="unit.greet")
    def greet(to: str) -> None: ...

    app.periodic("0 * * * *", greet, args=("a",), name="greet-a")
    app.periodic("30 * * * *", greet, args=("b",), name="greet-b")
    assert sorted(Beat(app).schedules()) == ["greet-a", "greet-b"]


@pytest.mark.parametrize("options", [{"interval": 0}, {"standby_interval": -1.0}])
def test_beat_refuses_non_positive_intervals(app: venturi.App, options: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError, match="must be positive"):
        Beat(app, **options)


def test_from_task_refuses_a_task_without_schedule(app: venturi.App) -> None:
    @app.task(kind="unit.plain")
    def plain() -> None: ...

    with pytest.raises(InvalidSchedule, match="declares no schedule"):
        Schedule.from_task(plain)


def test_beat_refuses_an_app_without_schedules(app: venturi.App) -> None:
    @app.task(kind="unit.plain")
    def plain() -> None: ...

    with pytest.raises(ConfigurationError, match="no schedules"):
        Beat(app)
