"""Limits per key and shared limits through the real claim (ADR 0138): claims are made
with ``claim_limited`` as a worker's plan makes them, and every count is read back
from the database."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import venturi
from venturi.errors import ConfigurationError, InvalidArgument
from venturi.runtime.claim_plan import ClaimPlan
from venturi.task import default_registry
from venturi.testing import drain
from venturi.types import LimitedClaim

LEASE = timedelta(seconds=30)


def _claim(app: venturi.App, *tasks: Any, limit: int = 8, worker: str = "w:1") -> LimitedClaim:
    plan = ClaimPlan.for_tasks({t.kind: t for t in tasks}, shared=app.shared_limits())
    return app.backend.claim_limited(
        kinds=sorted(t.kind for t in tasks),
        limit=limit,
        worker_id=worker,
        lease=LEASE,
        limits=plan.limits,
    )


def _key(db: Any, job: Any) -> str:
    return str(db.scalar("SELECT fair_key FROM {{prefix}}_jobs WHERE id = %s", [job.claim.job_id]))


def _keyed(app: venturi.App, n: int = 1, kind: str = "keyed.sync", **options: Any) -> Any:
    @app.task(kind=kind, concurrency_key=lambda tenant, **_: tenant, key_concurrency=n, **options)
    def handler(tenant: Any, n: int = 0) -> int:
        return n

    return handler


def test_one_job_per_key_is_claimed_and_a_busy_key_does_not_hold_up_the_others(
    app: venturi.App, db: Any
) -> None:
    task = _keyed(app)
    task.delay_many([("a", n) for n in range(5)] + [("b", 0), ("c", 0)])

    first = _claim(app, task)
    second = _claim(app, task, worker="w:2")

    assert sorted(_key(db, j) for j in first.jobs) == ["a", "b", "c"]
    assert second.jobs == []
    # a's first job (claim order: tier, then age) is the one claimed
    claimed_a = db.scalar(
        "SELECT payload->>'n' FROM {{prefix}}_jobs WHERE status = 'claimed' AND fair_key = 'a'"
    )
    assert claimed_a == "0"


def test_a_finished_job_frees_its_key_for_the_next_job_of_that_key_in_claim_order(
    app: venturi.App, db: Any
) -> None:
    task = _keyed(app)
    task.delay_many([("a", n) for n in range(3)])
    task.apply_async(("a", 9), priority=venturi.Priority.HIGH)

    order = []
    for _ in range(4):
        [job] = _claim(app, task).jobs
        assert _claim(app, task, worker="w:2").jobs == []
        app.backend.release([job.claim])  # a release gives the key back: the same job again
        [again] = _claim(app, task).jobs
        assert again.claim.job_id == job.claim.job_id
        order.append(again.payload)
        db.execute(
            "UPDATE {{prefix}}_jobs SET status = 'completed' WHERE id = %s", [job.claim.job_id]
        )
    assert [o["n"] for o in order] == [9, 0, 1, 2], order


def test_n_jobs_per_key_with_key_concurrency_n(app: venturi.App, db: Any) -> None:
    task = _keyed(app, n=3)
    task.delay_many([("a", n) for n in range(10)] + [("b", n) for n in range(2)])

    claimed = _claim(app, task, limit=10).jobs + _claim(app, task, limit=10, worker="w:2").jobs

    keys = Counter(_key(db, j) for j in claimed)
    assert keys == {"a": 3, "b": 2}


def test_a_recovered_claim_gives_its_key_back(app: venturi.App, db: Any) -> None:
    task = _keyed(app)
    task.delay_many([("a", 0), ("a", 1)])
    [job] = _claim(app, task).jobs
    db.execute("UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 s'")
    assert app.backend.recover_stale(limit=10, max_failures={}, default_max_failures=20)
    [again] = _claim(app, task).jobs
    assert again.claim.job_id == job.claim.job_id


def test_a_cancel_request_holds_the_key_until_the_run_ends(app: venturi.App, db: Any) -> None:
    task = _keyed(app)
    first = task.delay("a", 0)
    second = task.delay("a", 1)
    third = task.delay("a", 2)
    [job] = _claim(app, task).jobs
    assert job.claim.job_id == first.id
    app.cancel(first.id)  # a claimed job: cancel is requested, the run still holds the key
    app.cancel(second.id)  # a pending job: dead at once
    assert _claim(app, task).jobs == []
    app.backend.release([job.claim])
    db.execute("UPDATE {{prefix}}_jobs SET status = 'dead' WHERE id = %s", [first.id])
    [next_job] = _claim(app, task).jobs
    assert next_job.claim.job_id == third.id


def test_the_key_function_s_bad_values_are_refused_at_enqueue_and_nothing_is_written(
    app: venturi.App, db: Any
) -> None:
    task = _keyed(app)
    for bad in (None, [1], {"a": 1}, True, ""):
        with pytest.raises(InvalidArgument):
            task.delay(bad)

    @app.task(kind="keyed.raises", concurrency_key=lambda tenant, **_: 1 / 0)
    def raises(tenant: str) -> None: ...

    with pytest.raises(InvalidArgument, match="ZeroDivisionError"):
        raises.delay("a")
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs") == 0
    task.delay(7)
    assert db.scalar("SELECT fair_key FROM {{prefix}}_jobs") == "7"


def test_key_options_are_checked_at_decoration(app: venturi.App) -> None:
    for options, message in [
        ({"concurrency_key": lambda t, **_: t, "key_concurrency": 0}, "at least 1"),
        ({"key_concurrency": 2}, "needs concurrency_key"),
        ({"concurrency_key": "tenant"}, "callable"),
        ({"concurrency_key": lambda other: other}, "by name"),
        ({"rate_key": lambda t, **_: t}, "needs rate_limit"),
        ({"concurrency_key": lambda t, **_: t, "fair_key": lambda t, **_: t}, "fair_key"),
        ({"limits": ["nowhere"]}, "nowhere"),
        ({"limits": "stripe"}, "list"),
    ]:
        with pytest.raises(ConfigurationError, match=message):

            @app.task(kind="keyed.bad", **options)
            def bad(t: str) -> None: ...


# -- rate per key ----------------------------------------------------------------------


def test_a_rate_per_key_spends_each_key_s_starts_apart(app: venturi.App, db: Any) -> None:
    @app.task(kind="rated.key", rate_limit="1/h", rate_key=lambda tenant, **_: tenant)
    def rated(tenant: str, n: int) -> int:
        return n

    rated.delay_many([("a", 0), ("a", 1), ("b", 0)])

    first = _claim(app, rated)
    second = _claim(app, rated, worker="w:2")

    assert len(first.jobs) == 2  # one start per key (burst 1 at 1/h)
    assert second.jobs == []
    assert db.scalar("SELECT count(*) FROM {{prefix}}_key_rates WHERE kind = 'rated.key'") == 2


# -- shared limits ---------------------------------------------------------------------


def test_kinds_sharing_a_limit_are_capped_together(app: venturi.App, db: Any) -> None:
    app.limit("stripe", concurrency=3)

    @app.task(kind="shared.charge", limits=["stripe"])
    def charge(n: int) -> int:
        return n

    @app.task(kind="shared.refund", limits=["stripe"])
    def refund(n: int) -> int:
        return n

    charge.delay_many([(n,) for n in range(5)])
    refund.delay_many([(n,) for n in range(5)])

    first = _claim(app, charge)
    second = _claim(app, refund, worker="w:2")
    third = _claim(app, charge, refund, worker="w:3")

    assert len(first.jobs) == 3
    assert second.jobs == [] and "shared.refund" in second.throttled
    assert third.jobs == []
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'claimed'") == 3


def test_a_shared_rate_is_spent_by_every_kind_naming_it(app: venturi.App, db: Any) -> None:
    app.limit("api", rate="10/h")  # a burst of one

    @app.task(kind="shared.one", limits=["api"])
    def one() -> None: ...

    @app.task(kind="shared.two", limits=["api"])
    def two() -> None: ...

    one.delay()
    two.delay()
    assert len(_claim(app, one, two).jobs) == 1
    assert _claim(app, one, two).jobs == []


def test_a_default_registry_task_naming_an_undeclared_limit_fails_at_worker_start(
    app: venturi.App,
) -> None:
    @venturi.task(kind="shared.undeclared", limits=["later"])
    def undeclared() -> None: ...

    try:
        with pytest.raises(ConfigurationError, match="later"):
            drain(app, ["shared.undeclared"])
        app.limit("later", concurrency=1)
        drain(app, ["shared.undeclared"])
    finally:
        default_registry._tasks.pop("shared.undeclared")  # other tests' workers serve all


# -- debounce --------------------------------------------------------------------------


def test_a_debounced_burst_is_one_job_that_starts_a_debounce_after_the_last_enqueue(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="debounced", dedup=lambda doc, **_: doc, debounce=timedelta(seconds=30))
    def reindex(doc: str) -> None: ...

    first = reindex.delay("d1")
    start = db.scalar("SELECT visible_at - created_at FROM {{prefix}}_jobs")
    assert timedelta(seconds=29) < start <= timedelta(seconds=30)
    db.execute("UPDATE {{prefix}}_jobs SET visible_at = now() + interval '1 s'")
    again = reindex.delay("d1")

    assert again.id == first.id and again.merged
    row = db.one("SELECT count(*) AS n, max(visible_at) - now() AS wait FROM {{prefix}}_jobs")
    assert row["n"] == 1
    assert timedelta(seconds=29) < row["wait"] <= timedelta(seconds=30)
    assert drain(app, ["debounced"]) == []  # not due yet


def test_debounce_needs_dedup_and_a_positive_delay(app: venturi.App) -> None:
    for options, message in [
        ({"debounce": 5}, "needs dedup"),
        ({"debounce": 0, "dedup": lambda d, **_: d}, "positive"),
        ({"debounce": "5s", "dedup": lambda d, **_: d}, "positive"),
    ]:
        with pytest.raises(ConfigurationError, match=message):

            @app.task(kind="debounced.bad", **options)
            def bad(d: str) -> None: ...


# -- on_dead ---------------------------------------------------------------------------


def _with_callback(app: venturi.App) -> tuple[Any, Any]:
    @app.task(kind="dead.handler")
    def handler(job_id: str, kind: str, note: str | None) -> None: ...

    @app.task(kind="dead.failing", on_dead=handler, max_failures=1)
    def failing(n: int) -> None:
        raise venturi.Fail("no such customer")

    return handler, failing


def _callbacks(db: Any) -> list[dict[str, Any]]:
    return db.all(
        "SELECT payload, status FROM {{prefix}}_jobs WHERE kind = 'dead.handler' ORDER BY id"
    )


def test_a_job_that_ends_dead_enqueues_its_on_dead_task_with_id_kind_and_note(
    app: venturi.App, db: Any
) -> None:
    _, failing = _with_callback(app)
    ref = failing.delay(1)
    drain(app, ["dead.failing"])

    [callback] = _callbacks(db)
    assert callback["payload"]["job_id"] == ref.id
    assert callback["payload"]["kind"] == "dead.failing"
    assert "no such customer" in callback["payload"]["note"]
    drain(app, ["dead.handler"])
    assert db.scalar("SELECT status FROM {{prefix}}_jobs WHERE kind = 'dead.handler'") == (
        "completed"
    )


def test_a_cancelled_pending_job_enqueues_its_callback_and_a_completed_one_does_not(
    app: venturi.App, db: Any
) -> None:
    _, failing = _with_callback(app)
    drain(app, ["dead.failing"])  # registers the callback, as a worker's start does
    cancelled = failing.delay(1)
    app.cancel(cancelled.id)
    assert [c["payload"]["job_id"] for c in _callbacks(db)] == [cancelled.id]
    drain(app, ["dead.handler"])
    assert len(_callbacks(db)) == 1  # the callback's own completion enqueues nothing


def test_link_error_and_chain_on_error_name_a_callback_per_job(app: venturi.App, db: Any) -> None:
    handler, _ = _with_callback(app)

    @app.task(kind="dead.plain", max_failures=1)
    def plain(n: int) -> int:
        if n < 0:
            raise venturi.Fail("negative")
        return n

    linked = plain.apply_async((-1,), link_error=handler.s())
    flow = venturi.chain(plain.s(1), plain.s()).on_error(handler)
    flow_ref = flow.delay()
    db.execute("UPDATE {{prefix}}_jobs SET payload = '{\"n\": -2}' WHERE workflow_id IS NOT NULL")
    drain(app, ["dead.plain"])

    ids = sorted(c["payload"]["job_id"] for c in _callbacks(db))
    first_step = db.scalar("SELECT id FROM {{prefix}}_jobs WHERE workflow_id = %s", [flow_ref.id])
    assert ids == sorted([linked.id, first_step])


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aapply_async_takes_link_error_as_apply_async_does(
    app: venturi.App, db: Any, anyio_backend: str
) -> None:
    handler, _ = _with_callback(app)

    @app.task(kind="dead.async_linked", max_failures=1)
    def linked(n: int) -> None:
        raise venturi.Fail("no such customer")

    ref = await linked.aapply_async((1,), link_error=handler.s())
    await app.aclose()  # the loop's async pool, before drain runs in this thread
    drain(app, ["dead.async_linked"])
    assert [c["payload"]["job_id"] for c in _callbacks(db)] == [ref.id]


def test_on_dead_must_be_a_task_taking_job_id_kind_and_note(app: venturi.App) -> None:
    @app.task(kind="dead.wrong")
    def wrong(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="job_id, kind and note"):

        @app.task(kind="dead.bad", on_dead=wrong)
        def bad() -> None: ...

    with pytest.raises(ConfigurationError, match="must be a task"):

        @app.task(kind="dead.bad2", on_dead=print)
        def bad2() -> None: ...


# -- composition -----------------------------------------------------------------------


def test_a_per_key_cap_composes_with_a_global_cap_and_a_shared_limit(
    app: venturi.App, db: Any
) -> None:
    app.limit("partner", concurrency=4)
    task = _keyed(app, n=2, kind="keyed.composed", global_concurrency=3, limits=["partner"])
    task.delay_many([(tenant, n) for n in range(4) for tenant in ("a", "b", "c")])

    first = _claim(app, task, limit=8)
    assert len(first.jobs) == 3  # the global cap, under the shared limit's 4
    assert max(Counter(_key(db, j) for j in first.jobs).values()) <= 2
    assert _claim(app, task, limit=8, worker="w:2").jobs == []


def test_an_aged_job_of_a_busy_key_still_waits_for_its_key(app: venturi.App, db: Any) -> None:
    task = _keyed(app, kind="keyed.aged")
    task.delay_many([("a", 0), ("a", 1), ("b", 0)])
    db.execute("UPDATE {{prefix}}_jobs SET visible_at = visible_at - interval '1 hour'")
    assert app.backend.promote_waiting(["keyed.aged"], age_after=timedelta(minutes=5), limit=10)
    claimed = _claim(app, task, limit=8).jobs
    assert sorted(_key(db, j) for j in claimed) == ["a", "b"]
    assert all(j.priority is venturi.Priority.HIGH for j in claimed)


def test_every_way_to_dead_enqueues_the_callback_once(app: venturi.App, db: Any) -> None:
    """cancel_matching, a recovery at the backstop, an expiry: the trigger sees them all."""
    _, failing = _with_callback(app)
    drain(app, ["dead.failing"])
    bulk = [failing.delay(n) for n in range(3)]
    app.cancel_matching(kind="dead.failing")
    stale = failing.delay(9)
    [job] = _claim(app, failing).jobs
    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 s' WHERE id = %s",
        [stale.id],
    )
    app.backend.recover_stale(limit=10, max_failures={"dead.failing": 1}, default_max_failures=1)
    expired = failing.apply_async((10,), expires=timedelta(milliseconds=1))
    db.execute("SELECT pg_sleep(0.01)")
    drain(app, ["dead.failing"])

    callbacks = {c["payload"]["job_id"]: c["payload"]["note"] for c in _callbacks(db)}
    assert set(callbacks) == {*(r.id for r in bulk), job.claim.job_id, expired.id}
    assert callbacks[expired.id] == "expired"
    assert "max_failures" in callbacks[job.claim.job_id]
