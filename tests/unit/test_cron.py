"""Cron ticks are pure functions of (expression, zone, now), with documented DST rules.

Europe/Paris changes offset at 01:00 UTC: on 2026-03-29 from CET (+01:00) to
CEST (+02:00), so 02:00-02:59 local does not exist; on 2026-10-25 from CEST
back to CET, so 02:00-02:59 local happens twice.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from freezegun import freeze_time
from hypothesis import given, settings
from hypothesis import strategies as st

from venturi.cron import next_tick, previous_tick, ticks, validate_schedule, zone
from venturi.errors import ConfigurationError, InvalidSchedule

PARIS = ZoneInfo("Europe/Paris")
SPRING = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 02:00 CET becomes 03:00 CEST
AUTUMN = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)  # 03:00 CEST becomes 02:00 CET
CET = timedelta(hours=1)
CEST = timedelta(hours=2)


def paris(
    year: int, month: int, day: int, hour: int, minute: int, *, offset: timedelta
) -> datetime:
    """A Paris wall-clock time with an explicit offset, as an aware datetime in UTC."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC) - offset


def local(ticks_utc: list[datetime]) -> list[str]:
    return [t.astimezone(PARIS).isoformat() for t in ticks_utc]


# -- fixed-time expressions follow the calendar --------------------------------------------


def test_a_daily_time_in_the_spring_gap_runs_once_at_the_first_instant_after_the_gap() -> None:
    found = ticks(
        "30 2 * * *",
        PARIS,
        after=datetime(2026, 3, 28, tzinfo=UTC),
        until=datetime(2026, 3, 31, tzinfo=UTC),
    )
    assert local(found) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_several_fixed_times_in_the_spring_gap_collapse_into_one_run() -> None:
    found = ticks(
        "0,20,40 2 * * *",
        PARIS,
        after=SPRING - timedelta(hours=3),
        until=SPRING + timedelta(hours=3),
    )
    assert found == [SPRING]


def test_a_daily_time_in_the_autumn_overlap_runs_once_at_its_first_occurrence() -> None:
    found = ticks(
        "30 2 * * *",
        PARIS,
        after=datetime(2026, 10, 24, tzinfo=UTC),
        until=datetime(2026, 10, 27, tzinfo=UTC),
    )
    assert local(found) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_the_second_occurrence_of_an_overlapping_daily_time_is_not_a_tick() -> None:
    second_0230 = paris(2026, 10, 25, 2, 30, offset=CET)
    assert next_tick("30 2 * * *", PARIS, after=second_0230 - timedelta(seconds=1)) == paris(
        2026, 10, 26, 2, 30, offset=CET
    )


def test_daily_aliases_are_fixed_time_expressions() -> None:
    assert next_tick("@daily", PARIS, after=AUTUMN) == paris(2026, 10, 26, 0, 0, offset=CET)


# -- interval expressions follow real time -------------------------------------------------


def test_an_interval_schedule_skips_spring_times_that_do_not_exist() -> None:
    found = ticks(
        "*/30 * * * *", PARIS, after=SPRING - timedelta(hours=1), until=SPRING + timedelta(hours=1)
    )
    assert local(found) == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]


def test_an_hourly_schedule_keeps_its_real_time_rhythm_across_the_spring_gap() -> None:
    found = ticks(
        "30 * * * *", PARIS, after=SPRING - timedelta(hours=1), until=SPRING + timedelta(hours=2)
    )
    assert [t - found[0] for t in found] == [timedelta(hours=h) for h in range(3)]


def test_an_interval_schedule_runs_at_both_occurrences_of_the_autumn_overlap() -> None:
    found = ticks(
        "*/30 * * * *", PARIS, after=AUTUMN - timedelta(hours=1), until=AUTUMN + timedelta(hours=1)
    )
    assert local(found) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(found))


def test_previous_tick_inside_the_autumn_overlap_sees_the_first_occurrence_as_earlier() -> None:
    during_second_pass = paris(2026, 10, 25, 2, 10, offset=CET)
    assert previous_tick("*/30 * * * *", PARIS, until=during_second_pass) == paris(
        2026, 10, 25, 2, 0, offset=CET
    )
    just_before_transition = AUTUMN - timedelta(minutes=1)
    assert next_tick("*/30 * * * *", PARIS, after=just_before_transition) == AUTUMN


# -- the set of ticks is fixed: next/previous agree and never go back ----------------------

EXPRESSIONS = ["30 2 * * *", "*/30 * * * *", "0,20,40 2 * * *", "15 * * * *", "0 3 * * 0", "@daily"]
AROUND_DST = st.sampled_from([SPRING, AUTUMN]).flatmap(
    lambda pivot: st.integers(min_value=-3 * 3600, max_value=3 * 3600).map(
        lambda seconds: pivot + timedelta(seconds=seconds)
    )
)


@settings(max_examples=150, deadline=None)
@given(expression=st.sampled_from(EXPRESSIONS), after=AROUND_DST)
def test_next_tick_is_the_first_tick_strictly_after_and_previous_tick_agrees(
    expression: str, after: datetime
) -> None:
    following = next_tick(expression, PARIS, after=after)
    assert following > after
    assert following.tzinfo is UTC
    # No tick lies in (after, following): the last one at or before following - 1 s is <= after.
    assert previous_tick(expression, PARIS, until=following - timedelta(seconds=1)) <= after
    assert previous_tick(expression, PARIS, until=following) == following
    # Asking again from any later instant before the tick gives the same tick, never an earlier one.
    midway = after + (following - after) / 2
    assert next_tick(expression, PARIS, after=midway) == following


@settings(max_examples=100, deadline=None)
@given(expression=st.sampled_from(EXPRESSIONS), until=AROUND_DST)
def test_previous_tick_is_the_last_tick_at_or_before(expression: str, until: datetime) -> None:
    preceding = previous_tick(expression, PARIS, until=until)
    assert preceding <= until
    assert next_tick(expression, PARIS, after=preceding) > until


# -- plain cron, seconds, aliases ----------------------------------------------------------


def test_utc_schedules_are_plain_cron() -> None:
    after = datetime(2026, 1, 30, 23, 59, 59, 500_000, tzinfo=UTC)
    assert next_tick("0 0 * * *", ZoneInfo("UTC"), after=after) == datetime(2026, 1, 31, tzinfo=UTC)
    assert next_tick("0 0 1 * *", ZoneInfo("UTC"), after=after) == datetime(2026, 2, 1, tzinfo=UTC)


def test_a_tick_exactly_at_after_is_not_returned_again() -> None:
    tick = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
    assert next_tick("0 3 * * *", ZoneInfo("UTC"), after=tick) == tick + timedelta(days=1)
    assert previous_tick("0 3 * * *", ZoneInfo("UTC"), until=tick) == tick


def test_day_of_month_and_day_of_week_are_ored_as_in_vixie_cron() -> None:
    # The 13th, or any Friday: 2026-02-06 is a Friday, before the 13th.
    after = datetime(2026, 2, 1, tzinfo=UTC)
    assert next_tick("0 0 13 * 5", ZoneInfo("UTC"), after=after) == datetime(2026, 2, 6, tzinfo=UTC)


def test_a_six_field_expression_reads_seconds_first() -> None:
    after = datetime(2026, 5, 1, 12, 0, 7, tzinfo=UTC)
    assert next_tick("*/10 * * * * *", ZoneInfo("UTC"), after=after) == datetime(
        2026, 5, 1, 12, 0, 10, tzinfo=UTC
    )
    assert next_tick("30 0 12 * * *", ZoneInfo("UTC"), after=after) == datetime(
        2026, 5, 1, 12, 0, 30, tzinfo=UTC
    )


def test_leap_day_schedules_wait_for_the_next_leap_year() -> None:
    after = datetime(2026, 3, 1, tzinfo=UTC)
    assert next_tick("0 0 29 2 *", ZoneInfo("UTC"), after=after) == datetime(
        2028, 2, 29, tzinfo=UTC
    )


def test_results_do_not_depend_on_the_machine_clock() -> None:
    after = datetime(2026, 3, 29, 0, 59, 30, tzinfo=UTC)
    expected = next_tick("30 2 * * *", PARIS, after=after)
    with freeze_time("2031-07-14 12:00:00"):
        assert next_tick("30 2 * * *", PARIS, after=after) == expected == SPRING


@freeze_time("2026-03-29 00:59:30")
def test_the_tick_after_a_frozen_now_just_before_spring_forward_is_0300_cest() -> None:
    now = datetime.now(UTC)
    assert next_tick("30 2 * * *", PARIS, after=now).astimezone(PARIS).isoformat() == (
        "2026-03-29T03:00:00+02:00"
    )


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "* * *",
        "61 * * * *",
        "* 24 * * *",
        "* * * * * * *",  # croniter's year field: not part of venturi's syntax
        "H * * * *",
        "@reboot",
        "0 0 31 2 *",  # never matches
        "every day",
    ],
)
def test_invalid_cron_expressions_are_refused(expression: str) -> None:
    with pytest.raises(InvalidSchedule, match="cron expression") as caught:
        validate_schedule(expression, "UTC")
    assert isinstance(caught.value, ConfigurationError)


@pytest.mark.parametrize(
    "timezone", ["Mars/Olympus_Mons", "", "../etc/passwd", "/etc/localtime", "CEST+2"]
)
def test_unknown_time_zones_are_refused(timezone: str) -> None:
    with pytest.raises(InvalidSchedule, match="time zone"):
        validate_schedule("0 3 * * *", timezone)


@pytest.mark.parametrize("expression", ["0 3 * * *", "@hourly", "*/5 * * * * *", "0 9 * * MON-FRI"])
def test_valid_schedules_pass_validation(expression: str) -> None:
    validate_schedule(expression, "Europe/Paris")
    assert zone("Europe/Paris") == PARIS


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_tick("0 3 * * *", PARIS, after=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        previous_tick("0 3 * * *", PARIS, until=datetime(2026, 1, 1))
