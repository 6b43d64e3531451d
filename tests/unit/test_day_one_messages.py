"""Messages a new user reads first: delays, cron ranges, prefetch, log lines (ADR 0118)."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime, timedelta

import orjson
import pytest

import venturi
from venturi.cron import validate_schedule
from venturi.errors import ConfigurationError, InvalidDelay, InvalidSchedule
from venturi.logs import JsonFormatter
from venturi.options import validate_delay
from venturi.runtime.executor import _span
from venturi.worker import MAX_PREFETCH, Worker


@pytest.mark.parametrize(
    ("countdown", "message"),
    [
        (-5, "invalid delay -5 s: countdown must not be negative"),
        (timedelta(seconds=-5), "invalid delay -5 s: countdown must not be negative"),
        (-0.25, "invalid delay -0.25 s: countdown must not be negative"),
        (timedelta(days=-1), "invalid delay -86400 s: countdown must not be negative"),
        ("soon", "invalid delay: countdown must be a timedelta or a finite number of seconds"),
    ],
)
def test_a_bad_countdown_is_shown_in_seconds_not_as_a_timedelta_repr(
    countdown: object, message: str
) -> None:
    with pytest.raises(InvalidDelay) as raised:
        validate_delay(countdown, None)
    assert str(raised.value).startswith(message)
    assert "datetime.timedelta" not in str(raised.value)


def test_every_invalid_delay_message_names_its_value_readably() -> None:
    naive = datetime(2030, 1, 2, 3, 4, 5)
    cases = [(1, naive), (None, naive), (None, "tomorrow")]
    messages = []
    for countdown, eta in cases:
        with pytest.raises(InvalidDelay) as raised:
            validate_delay(countdown, eta)
        messages.append(str(raised.value))
    assert messages == [
        "invalid delay 1 s: give either countdown or eta, not both",
        "invalid delay 2030-01-02T03:04:05: eta must be timezone-aware (e.g. "
        "datetime.now(UTC) + ...)",
        "invalid delay: eta must be a datetime, got 'tomorrow'",
    ]


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 1 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
        ("0-75/5 * * * *", "minute 75 is out of range 0-59"),
        ("0 1,2,99 * * *", "hour 99 is out of range 0-23"),
        ("60 0 0 * * *", "second 60 is out of range 0-59"),
    ],
)
def test_a_cron_number_out_of_range_names_its_field_and_the_range(
    expression: str, reason: str
) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        validate_schedule(expression, "UTC")
    assert str(raised.value) == f"invalid cron expression {expression!r}: {reason}"


def test_a_cron_expression_with_the_wrong_field_count_says_how_many_it_has() -> None:
    with pytest.raises(InvalidSchedule, match=r"\(got 4 field\(s\)\)"):
        validate_schedule("*/5 * * *", "UTC")


def test_the_worker_refuses_a_prefetch_above_the_maximum_and_names_it() -> None:
    app = venturi.App("postgresql://nobody@127.0.0.1:1/none", prefix="t_unit", set_as_current=False)
    app.task(kind="unit.noop")(lambda: None)
    assert Worker(app, prefetch=MAX_PREFETCH).prefetch == MAX_PREFETCH
    with pytest.raises(ConfigurationError, match=f"between 0 and {MAX_PREFETCH}, got 1001"):
        Worker(app, prefetch=MAX_PREFETCH + 1)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0004, "0.4 ms"),
        (0.012, "12 ms"),
        (0.9994, "999 ms"),
        (2.0, "2 s"),
        (2.25, "2.25 s"),
        (150.0, "2.5 min"),
        (7200.0, "2 h"),
        (86_400.0 * 400, "400 d"),
    ],
)
def test_run_durations_and_waits_read_in_a_unit_that_fits(seconds: float, shown: str) -> None:
    assert _span(seconds) == shown


def test_a_json_log_line_names_its_fields_and_keeps_the_job_extras() -> None:
    try:
        raise ConnectionError("refused\nby upstream")
    except ConnectionError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "venturi.runs", logging.WARNING, __file__, 1, "%s run %d", ("k", 2), exc_info
    )
    record.job_id, record.kind, record.run, record.unrelated = "01J", "k", 2, "x"
    record.created = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC).timestamp()

    line = JsonFormatter().format(record)

    assert "\n" not in line
    parsed = orjson.loads(line)
    assert parsed["time"] == "2026-01-02T03:04:05.678000Z"
    assert (parsed["level"], parsed["logger"], parsed["message"]) == (
        "WARNING",
        "venturi.runs",
        "k run 2",
    )
    assert (parsed["job_id"], parsed["kind"], parsed["run"]) == ("01J", "k", 2)
    assert "unrelated" not in parsed
    assert "ConnectionError: refused\nby upstream" in parsed["exception"]
