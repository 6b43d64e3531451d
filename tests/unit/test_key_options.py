"""The options of limits per key, shared limits, debounce and failure callbacks, checked at
decoration and at enqueue without a database (ADR 0138)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from venturi.dashboard.keys import describe
from venturi.errors import ConfigurationError, InvalidArgument
from venturi.key_options import callback_kind, claim_key, validate_limit_name
from venturi.options import TaskOptions
from venturi.registry import Registry
from venturi.runtime.claim_plan import ClaimPlan, kind_limits
from venturi.task import TaskDecorator
from venturi.types import KindLimits, RateLimit, SharedLimit


def _task(**options: Any) -> Any:
    def handler(tenant: str, n: int = 0) -> None: ...

    return TaskDecorator(TaskOptions.parse(kind="unit.keyed", **options), registry=Registry())(
        handler
    )


def tenant(tenant: str, **_: Any) -> str:
    return tenant


def test_a_key_function_defaults_to_one_job_per_key() -> None:
    options = TaskOptions.parse(concurrency_key=tenant)
    assert options.key_concurrency == 1
    assert TaskOptions.parse(concurrency_key=tenant, key_concurrency=3).key_concurrency == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency_key": tenant, "key_concurrency": 0}, "at least 1"),
        ({"concurrency_key": tenant, "key_concurrency": True}, "at least 1"),
        ({"concurrency_key": tenant, "key_concurrency": 1.5}, "at least 1"),
        ({"key_concurrency": 2}, "needs concurrency_key"),
        ({"rate_key": tenant}, "needs rate_limit"),
        ({"rate_key": tenant, "rate_limit": "1/s", "concurrency_key": lambda t, **_: t}, "same"),
        ({"rate_key": tenant, "rate_limit": "1/x"}, "rate_limit must be"),
        ({"concurrency_key": tenant, "fair_key": tenant}, "fair_key"),
        ({"limits": ["a b"]}, "name"),
        ({"limits": "stripe"}, "list"),
        ({"limits": ["stripe"], "fair_key": tenant}, "fair_key"),
        ({"debounce": 5}, "needs dedup"),
        ({"debounce": -1, "dedup": tenant}, "positive"),
        ({"debounce": float("nan"), "dedup": tenant}, "positive"),
        ({"on_dead": print}, "must be a task"),
    ],
)
def test_bad_key_options_are_refused_at_decoration(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TaskOptions.parse(**options)


def test_a_key_function_that_cannot_take_the_arguments_is_refused_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match=r"concurrency_key of 'unit\.keyed'"):
        _task(concurrency_key=lambda other: other)


@pytest.mark.parametrize("value", [None, True, [1], {"a": 1}, b"x", "", "a\x00b", "k" * 256])
def test_a_key_that_is_not_short_text_or_a_number_is_invalid_at_enqueue(value: object) -> None:
    with pytest.raises(InvalidArgument):
        claim_key(lambda **_: value, {}, "unit.keyed")


def test_numbers_are_keys_as_text_and_a_raising_function_names_its_error() -> None:
    assert claim_key(lambda **_: 42, {}, "k") == "42"
    assert claim_key(lambda **_: 1.5, {}, "k") == "1.5"
    with pytest.raises(InvalidArgument, match="KeyError"):
        claim_key(lambda **a: a["missing"], {}, "k")


def test_the_key_goes_in_the_new_job_and_a_bad_one_raises_before_any_io() -> None:
    task = _task(concurrency_key=tenant)
    assert task.new_job(("acme",)).fair_key == "acme"
    with pytest.raises(InvalidArgument):
        task.new_job((None,))


def test_a_debounced_job_waits_the_debounce_unless_a_countdown_is_given() -> None:
    task = _task(dedup=tenant, debounce=timedelta(seconds=5))
    job = task.new_job(("acme",))
    assert job.delay == timedelta(seconds=5) and job.debounce == timedelta(seconds=5)
    assert task.new_job(("acme",), countdown=1).delay == timedelta(seconds=1)
    assert _task(dedup=tenant).new_job(("acme",)).debounce is None


def test_shared_limit_names_and_callbacks() -> None:
    assert validate_limit_name("stripe.eu-1") == "stripe.eu-1"
    with pytest.raises(ConfigurationError):
        validate_limit_name("")
    handler = _task()
    assert callback_kind(handler) == "unit.keyed"
    with pytest.raises(ConfigurationError, match="without arguments"):
        callback_kind(handler.s("acme"))


def test_the_limits_in_force_come_from_the_task_and_the_app_s_shared_limits() -> None:
    task = _task(
        concurrency_key=tenant,
        key_concurrency=2,
        rate_limit="10/s",
        rate_key=tenant,
        limits=["stripe"],
    )
    stripe = SharedLimit("stripe", ("unit.keyed",), 5, RateLimit(100, timedelta(seconds=1)))
    limits = kind_limits(task, {"stripe": stripe})
    assert limits == KindLimits(
        rate_limit=RateLimit(10, timedelta(seconds=1)),
        key_concurrency=2,
        rate_per_key=True,
        shared=(stripe,),
    )
    assert limits.is_keyed
    assert describe(limits) == "key_concurrency=2, rate_limit=10/s per key, limits=stripe"
    with pytest.raises(ConfigurationError, match="stripe"):
        kind_limits(task, {})
    plan = ClaimPlan.for_tasks({task.kind: task}, shared={"stripe": stripe})
    assert plan.limits[task.kind] == limits
    assert ClaimPlan.for_tasks({"p": _task()}).limits == {}


def test_a_keyed_kind_left_out_after_a_short_claim_is_asked_for_once_an_outcome_is_written() -> (
    None
):
    task = _task(concurrency_key=tenant)
    plan = ClaimPlan.for_tasks({task.kind: task})
    plan.throttle({task.kind: 0.1}, now=0.0)
    assert not plan.is_unthrottled(task.kind, 0.05)
    plan.ended(task.kind)
    assert plan.is_unthrottled(task.kind, 0.05)
