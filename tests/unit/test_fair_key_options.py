"""Fair keys (ADR 0129): the function is checked against the handler at decoration, its
value at every enqueue (typed errors that say what is accepted, nothing written), and the
claim plan gives a fair kind claims of its own, in turns."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from venturi.context import Context
from venturi.errors import ConfigurationError, InvalidPayload
from venturi.options import MAX_FAIR_KEY_BYTES, TaskOptions
from venturi.runtime.claim_plan import ClaimPlan, ClaimRequest
from venturi.task import Task

MINUTE = timedelta(minutes=1)


def _task(fn: Any, **options: Any) -> Task[Any, Any]:
    return Task(fn, TaskOptions.parse(kind="reports.build", **options), app=None)


def build(ctx: Context, tenant: str, report: str, pages: int = 1) -> None:
    """A handler of the shape fair keys are for: a tenant among its arguments."""


def build_any(ctx: Context, tenant: str, **extra: Any) -> None:
    """A handler that takes extra keyword arguments."""


@pytest.mark.parametrize(
    "fair_key",
    [
        lambda tenant, **_: tenant,
        lambda tenant, report, pages: tenant,
        lambda **arguments: arguments["tenant"],
        lambda tenant, report, pages=2, region="eu": tenant,
    ],
)
def test_a_fair_key_that_accepts_the_handlers_arguments_by_name_is_taken(fair_key: Any) -> None:
    job = _task(build, fair_key=fair_key).new_job(("acme", "weekly"))

    assert job.fair_key == "acme"


@pytest.mark.parametrize(
    ("fair_key", "why"),
    [
        (lambda tenant: tenant, "unexpected keyword argument 'report'"),
        (lambda customer, **_: customer, "missing a required argument: 'customer'"),
        (lambda tenant, /, **_: tenant, "'tenant' parameter is positional only"),
        (lambda: "x", "unexpected keyword argument 'tenant'"),
    ],
)
def test_a_fair_key_that_does_not_fit_the_handler_is_refused_at_decoration(
    fair_key: Any, why: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _task(build, fair_key=fair_key)

    message = str(refused.value)
    assert "called with the handler's arguments by name, (tenant, report, pages)" in message
    assert "e.g. lambda tenant, **_: ..." in message
    assert why in message


def test_a_handler_taking_extra_keywords_needs_a_fair_key_that_takes_them_too() -> None:
    with pytest.raises(ConfigurationError, match=r"handler takes \*\*kwargs, so fair_key must too"):
        _task(build_any, fair_key=lambda tenant: tenant)

    job = _task(build_any, fair_key=lambda tenant, **_: tenant).new_job(("acme",), {"x": 1})
    assert job.fair_key == "acme"


def test_the_fair_key_sees_the_defaults_of_arguments_not_passed() -> None:
    job = _task(build, fair_key=lambda tenant, pages, **_: f"{tenant}/{pages}").new_job(
        (), {"tenant": "acme", "report": "weekly"}
    )

    assert job.fair_key == "acme/1"


@pytest.mark.parametrize("value", ["tenant", 3, object()])
def test_a_fair_key_that_is_not_callable_is_refused(value: object) -> None:
    with pytest.raises(ConfigurationError, match="fair_key must be callable"):
        TaskOptions.parse(fair_key=value)


@pytest.mark.parametrize("limit", [{"global_concurrency": 2}, {"rate_limit": "10/s"}])
def test_a_fair_key_beside_a_limit_across_workers_is_refused(limit: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="fair_key cannot be combined with"):
        TaskOptions.parse(fair_key=lambda **_: "k", **limit)


@pytest.mark.parametrize(
    ("returned", "says"),
    [
        (42, "must return a str, got 42"),
        (None, "must return a str, got None"),
        (b"acme", "must return a str"),
        ("", "returned an empty string"),
        ("a\nb", "contains control characters"),
        ("\ud800", "is not valid UTF-8"),
        ("é" * (MAX_FAIR_KEY_BYTES // 2 + 1), f"over {MAX_FAIR_KEY_BYTES}"),
    ],
)
def test_a_fair_key_value_that_cannot_be_stored_is_refused_at_enqueue(
    returned: object, says: str
) -> None:
    fair = _task(build, fair_key=lambda **_: returned)

    with pytest.raises(InvalidPayload, match=says):
        fair.new_job(("acme", "weekly"))


def test_a_key_of_the_longest_size_is_taken() -> None:
    key = "k" * MAX_FAIR_KEY_BYTES
    assert _task(build, fair_key=lambda **_: key).new_job(("a", "b")).fair_key == key


def test_a_task_without_fair_key_enqueues_plain_jobs() -> None:
    assert _task(build).new_job(("acme", "weekly")).fair_key is None


def _plan() -> ClaimPlan:
    return ClaimPlan(
        leases={"fair.a": MINUTE, "fair.b": MINUTE, "plain.x": MINUTE, "plain.y": MINUTE},
        fair=["fair.a", "fair.b"],
    )


def test_each_fair_kind_is_claimed_alone_and_the_others_together_in_turns() -> None:
    plan = _plan()
    request = ClaimRequest(("fair.a", "fair.b", "plain.x", "plain.y"), 8, MINUTE)

    orders = [[turn.kinds for turn in plan.turns(request)] for _ in range(4)]

    a, b, plain = ("fair.a",), ("fair.b",), ("plain.x", "plain.y")
    assert orders == [[a, b, plain], [b, plain, a], [plain, a, b], [a, b, plain]]
    assert all(t.limit == 8 and t.lease == MINUTE for t in plan.turns(request))


def test_the_plan_of_tasks_knows_their_fair_kinds() -> None:
    tasks = {
        "fair": _task(build, fair_key=lambda tenant, **_: tenant),
        "plain": Task(build, TaskOptions.parse(kind="plain"), app=None),
    }
    assert ClaimPlan.for_tasks(tasks).fair == frozenset({"fair"})


def test_signatures_and_group_members_carry_the_key_of_their_own_arguments() -> None:
    fair = _task(build, fair_key=lambda tenant, **_: tenant)

    members = [fair.s("acme", "weekly"), fair.si(tenant="globex", report="daily")]

    assert [m.new_job().fair_key for m in members] == ["acme", "globex"]
