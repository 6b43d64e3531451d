"""Limits across workers (ADR 0128) are checked at decoration with errors that say what is
accepted, and the claim plan leaves a throttled kind out until its time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from venturi.errors import ConfigurationError
from venturi.options import TaskOptions, parse_rate_limit
from venturi.registry import Registry
from venturi.runtime.claim_plan import ClaimPlan, ClaimRequest
from venturi.task import Task, TaskDecorator, task
from venturi.types import KindLimits, RateLimit

MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("text", "starts", "period"),
    [
        ("100/s", 100, timedelta(seconds=1)),
        ("10/m", 10, timedelta(minutes=1)),
        ("1000/h", 1000, timedelta(hours=1)),
        (" 1/s ", 1, timedelta(seconds=1)),
    ],
)
def test_a_rate_limit_is_starts_per_second_minute_or_hour(
    text: str, starts: int, period: timedelta
) -> None:
    assert TaskOptions.parse(rate_limit=text).rate_limit == RateLimit(starts, period)


@pytest.mark.parametrize(
    "value", ["fast", "0/s", "10/fortnight", "-1/s", "1.5/s", "10", 10, b"1/s"]
)
def test_a_malformed_rate_limit_is_refused_saying_what_is_accepted(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"rate_limit must be '<n>/s', '<n>/m' or '<n>/h'"):
        task(rate_limit=value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [0, -3, 1.5, "2", True])
def test_a_global_cap_below_one_or_not_an_integer_is_refused(value: object) -> None:
    with pytest.raises(
        ConfigurationError, match="global_concurrency must be an integer of at least 1"
    ):
        TaskOptions.parse(global_concurrency=value)


def test_a_rate_limit_is_a_steady_rate_with_a_burst_of_a_tenth() -> None:
    assert parse_rate_limit("10/s").interval == timedelta(milliseconds=100)
    assert parse_rate_limit("10/s").burst == 1
    assert parse_rate_limit("100/s").burst == 10
    assert parse_rate_limit("1000/h").interval == timedelta(seconds=3.6)


def test_only_limited_kinds_carry_limits_in_the_plan() -> None:
    registry = Registry()

    def build(**options: object) -> Task[..., object]:
        return TaskDecorator(TaskOptions.parse(**options), registry=registry)(lambda: None)

    capped = build(kind="limits.capped", global_concurrency=2)
    rated = build(kind="limits.rated", rate_limit="5/m")
    plain = build(kind="limits.plain")

    plan = ClaimPlan.for_tasks({t.kind: t for t in (capped, rated, plain)})

    assert plan.limits == {
        "limits.capped": KindLimits(global_concurrency=2),
        "limits.rated": KindLimits(rate_limit=RateLimit(5, MINUTE)),
    }


def test_a_throttled_kind_is_left_out_until_its_time() -> None:
    plan = ClaimPlan(leases={"a": MINUTE, "b": MINUTE}, concurrency=4)
    plan.throttle({"a": 0.5}, now=10.0)

    assert plan.request(free=4, running={}, is_renewed=True, now=10.2) == ClaimRequest(
        ("b",), 4, MINUTE
    )
    assert plan.next_unthrottled(10.2) == pytest.approx(0.3)
    assert plan.request(free=4, running={}, is_renewed=True, now=10.5) == ClaimRequest(
        ("a", "b"), 4, MINUTE
    )
    assert plan.next_unthrottled(10.5) is None


def test_without_a_clock_the_plan_leaves_throttling_to_the_database() -> None:
    plan = ClaimPlan(leases={"a": MINUTE}, concurrency=1)
    plan.throttle({"a": 60.0}, now=10.0)

    assert plan.request(free=1, running={}, is_renewed=False) == ClaimRequest(("a",), 1, MINUTE)


def test_every_kind_throttled_means_no_claim() -> None:
    plan = ClaimPlan(leases={"a": MINUTE}, concurrency=1)
    plan.throttle({"a": 1.0}, now=0.0)

    assert plan.request(free=1, running={}, is_renewed=True, now=0.5) is None
