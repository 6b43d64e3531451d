"""Chains, chords and their nesting (SPEC 5.4, ADR 0125), on the real database: each
finish hands its result on in the transaction that records it, a dead step ends its
dependants, ``app.retry`` resumes them, and a bad step is refused before any write."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import venturi
from venturi import chain, chord, group
from venturi.errors import ArgumentsMismatch, Fail, InvalidPayload, JobFailed, WorkflowNotFound
from venturi.testing import drain, eager
from venturi.types import StepState


@pytest.fixture
def tasks(app: venturi.App) -> dict[str, Any]:
    calls: list[tuple[str, Any]] = []

    @app.task(kind="wf.add")
    def add(x: int, y: int) -> int:
        calls.append(("add", (x, y)))
        return x + y

    @app.task(kind="wf.total")
    def total(values: list[int], bonus: int = 0) -> int:
        calls.append(("total", values))
        return sum(values) + bonus

    @app.task(kind="wf.const")
    def const(value: int) -> int:
        calls.append(("const", value))
        return value

    @app.task(kind="wf.boom", max_failures=1)
    def boom(x: int) -> int:
        raise Fail(f"boom {x}")

    @app.task(kind="wf.flaky", max_failures=1)
    def flaky(x: int) -> int:
        if not flags.get("healed"):
            raise Fail("not yet")
        return x * 10

    flags: dict[str, bool] = {}
    return {
        "add": add,
        "total": total,
        "const": const,
        "boom": boom,
        "flaky": flaky,
        "calls": calls,
        "flags": flags,
    }


def test_a_chain_passes_each_result_on_and_si_steps_take_none(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add, const = tasks["add"], tasks["const"]
    ref = chain(add.s(1, 2), add.s(10), const.si(5), add.s(100)).delay()

    waiting = app.workflow(ref.id)
    assert [s.state for s in waiting.steps] == [StepState.PENDING] + [StepState.WAITING] * 3
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs") == 1  # the others wait in _steps
    assert db.scalar("SELECT count(*) FROM {{prefix}}_steps WHERE status = 'waiting'") == 3
    drain(app)

    assert ref.result(5) == 105
    assert tasks["calls"] == [("add", (1, 2)), ("add", (3, 10)), ("const", 5), ("add", (5, 100))]
    view = app.workflow(ref.id)
    assert [s.state for s in view.steps] == [StepState.COMPLETED] * 4
    assert view.state is StepState.COMPLETED
    assert [s.position for s in view.steps] == [0, 1, 2, 3]
    ids = [s.id for s in view.steps]
    assert [s.parents for s in view.steps] == [(), (ids[0],), (ids[1],), (ids[2],)]
    assert ref.outputs[0].id == ids[3]
    # the parent's result went into the first positional parameter, by name
    assert db.one("SELECT payload FROM {{prefix}}_jobs WHERE id = %s", (ids[1],))["payload"] == {
        "x": 3,
        "y": 10,
    }


def test_a_chord_callback_gets_every_member_result_in_order_and_runs_once(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    ref = chord([add.s(i, i) for i in range(20)], total.s(bonus=1)).delay()
    drain(app)

    assert ref.result(5) == sum(2 * i for i in range(20)) + 1
    totals = [c for c in tasks["calls"] if c[0] == "total"]
    assert totals == [("total", [2 * i for i in range(20)])]
    callback = ref.outputs[0].id
    assert db.scalar("SELECT count(*) FROM {{prefix}}_journal WHERE job_id = %s", (callback,)) == 1
    step = db.one("SELECT status, waiting_for FROM {{prefix}}_steps WHERE id = %s", (callback,))
    assert step == {"status": "enqueued", "waiting_for": 0}


def test_a_group_keeps_its_order_and_a_group_of_chains_gives_each_chains_last_result(
    app: venturi.App, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    plain = group(add.s(i, 1) for i in range(5)).delay()
    assert plain.workflow_id is None  # plain members: no workflow at all
    chains = group(chain(add.s(1, 1), add.s(1)), chain(add.s(2, 2), add.s(2)), add.s(0, 9)).delay()
    assert chains.workflow_id is not None
    drain(app)

    assert plain.results(5) == [1, 2, 3, 4, 5]
    assert chains.results(5) == [3, 6, 9]


def test_nesting_a_group_step_a_chain_ending_in_a_chord(
    app: venturi.App, tasks: dict[str, Any]
) -> None:
    add, total, const = tasks["add"], tasks["total"], tasks["const"]
    # the group's members each get 2; the next step gets the list of their results
    fan = chain(add.s(1, 1), group(add.s(10), add.s(20)), total.s()).delay()
    # a chain that ends in a chord whose header members each get the chain's result
    tail = chain(const.s(3), chord([add.s(1), add.s(2), add.s(3)], total.s())).delay()
    # a chord whose header holds chains
    deep = chord([chain(add.s(1, 1), add.s(1)), const.si(7)], total.s()).delay()
    ends_in_group = chain(const.s(1), group(add.s(1), add.s(2))).delay()
    drain(app)

    assert fan.result(5) == 12 + 22
    assert tail.result(5) == 4 + 5 + 6
    assert deep.result(5) == 3 + 7
    assert ends_in_group.is_list and ends_in_group.result(5) == [2, 3]
    assert len(app.workflow(fan.id).steps) == 4


def test_a_dead_member_ends_its_dependants_and_retry_resumes_them(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add, total, flaky = tasks["add"], tasks["total"], tasks["flaky"]
    ref = chord([add.s(1, 1), flaky.s(4), add.s(2, 2)], chain(total.s(), add.s(1))).delay()
    drain(app, include_scheduled=True)

    view = app.workflow(ref.id)
    by_kind = {s.kind: s for s in view.steps}
    dead_member = by_kind["wf.flaky"]
    assert dead_member.state is StepState.DEAD
    callback = by_kind["wf.total"]
    last = view.steps[-1]
    note = f"dependency {dead_member.id} (wf.flaky) ended dead"
    assert (callback.state, callback.note) == (StepState.DEAD, note)
    assert (last.state, last.note) == (StepState.DEAD, note)
    assert view.state is StepState.DEAD
    with pytest.raises(JobFailed, match="ended dead"):
        ref.result(1)
    assert [c for c in tasks["calls"] if c[0] == "total"] == []

    tasks["flags"]["healed"] = True
    app.retry(dead_member.id)
    resumed = {s.id: s.state for s in app.workflow(ref.id).steps}
    assert resumed[callback.id] is StepState.WAITING and resumed[last.id] is StepState.WAITING
    drain(app)

    assert ref.result(5) == 2 + 40 + 4 + 1
    assert [c for c in tasks["calls"] if c[0] == "total"] == [("total", [2, 40, 4])]


def test_cancelling_a_member_ends_its_dependants_dead(
    app: venturi.App, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    ref = chord([add.s(1, 1), add.s(2, 2)], total.s()).delay()
    first = app.workflow(ref.id).steps[0]
    app.cancel(first.id)
    drain(app)

    steps = app.workflow(ref.id).steps
    assert [s.state for s in steps] == [StepState.DEAD, StepState.COMPLETED, StepState.DEAD]
    assert steps[2].note == f"dependency {first.id} (wf.add) ended dead"


def test_a_step_recovered_dead_at_the_backstop_ends_its_dependants(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    ref = chain(add.s(1, 1), add.s(1)).delay()
    first = app.workflow(ref.id).steps[0]
    # a worker claimed the first step and vanished; its lease ran out at the backstop
    db.execute(
        "UPDATE {{prefix}}_jobs SET status = 'claimed', claimed_by = 'gone:1', run_count = 1,"
        " failure_count = 24, claim_expires_at = now() - interval '1 minute' WHERE id = %s",
        (first.id,),
    )
    recovered = app.backend.recover_stale(max_failures={}, default_max_failures=25, limit=10)

    assert recovered == 1
    steps = app.workflow(ref.id).steps
    assert [s.state for s in steps] == [StepState.DEAD, StepState.DEAD]
    assert steps[1].note == f"dependency {first.id} (wf.add) ended dead"


def test_bad_steps_are_refused_when_built_and_write_nothing(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add, total, const = tasks["add"], tasks["total"], tasks["const"]

    @app.task(kind="wf.spread")
    def spread(*values: int) -> int:
        return sum(values)

    with pytest.raises(ArgumentsMismatch):
        chain(add.s(1, 2), add.s(1, 2))  # the second step would get three arguments
    with pytest.raises(ArgumentsMismatch):
        chain(add.s(1, 1), chord([add.s(1)], add.s(1, 2)))  # the body would get three
    nested_only = chain(add.s(1), add.s(2))  # fits only after a parent: checked where placed
    with pytest.raises(ArgumentsMismatch):
        nested_only.delay()  # as a whole workflow, its first step misses an argument
    with pytest.raises(ArgumentsMismatch):
        chord([add.s(1, 1)], add.s())  # the callback gets one list, add needs two
    with pytest.raises(ArgumentsMismatch):
        chain(const.s(1), spread.s())  # the result would go into *values
    with pytest.raises(ArgumentsMismatch):
        chain(const.s(1), group(add.s(1, 2)))  # the member would get three
    with pytest.raises(InvalidPayload):
        chain(const.s(1), total.s(bonus=float("nan")))
    with pytest.raises(ArgumentsMismatch):
        chain(const.s(1), "not a signature")  # type: ignore[arg-type]

    assert db.jobs() == []
    assert db.all("SELECT * FROM {{prefix}}_steps") == []
    assert db.all("SELECT * FROM {{prefix}}_edges") == []


def test_a_waiter_on_a_waiting_step_is_woken_when_the_workflow_reaches_it(
    app: venturi.App, start_worker: Any, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    ref = chain(add.s(1, 1), add.s(1), add.s(1)).delay()
    start_worker(kinds=["wf.add"])
    assert ref.result(timeout=30) == 4


def test_an_unknown_workflow_is_refused(app: venturi.App) -> None:
    with pytest.raises(WorkflowNotFound):
        app.workflow("01ARZ3NDEKTSV4RRFFQ69G5FAV")


def test_cleanup_deletes_finished_steps_with_their_edges_and_keeps_waiting_ones(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    done = chain(add.s(1, 1), add.s(1)).delay()
    drain(app)
    half = chord([add.s(1, 1), tasks["const"].s(2)], total.s()).delay()
    drain(app, kinds=["wf.add"])  # the first member completes; the callback waits for the second

    assert app.cleanup(older_than=timedelta(0)) == 3  # done's two steps, half's first member
    with pytest.raises(WorkflowNotFound):
        app.workflow(done.id)
    left = app.workflow(half.id).steps
    assert [s.state for s in left] == [StepState.PENDING, StepState.WAITING]
    edges = db.all("SELECT parent_id, child_id, result FROM {{prefix}}_edges ORDER BY position")
    assert [e["child_id"] for e in edges] == [left[1].id, left[1].id]
    assert edges[0]["result"] == 2  # the cleaned member's result waits on its edge


def test_under_eager_a_workflow_runs_inline_and_a_dead_step_stops_its_dependants(
    app: venturi.App, db: Any, tasks: dict[str, Any]
) -> None:
    add, total, boom = tasks["add"], tasks["total"], tasks["boom"]
    with eager(app) as session:
        ref = chain(add.s(1, 2), group(add.s(1), add.s(2)), total.s()).delay()
        assert ref.result() == 4 + 5
        failed = chord([add.s(1, 1), boom.s(3)], total.s()).delay()
        with pytest.raises(JobFailed, match=r"dependency .* \(wf.boom\) ended dead"):
            failed.result()
    assert [r.kind for r in session.runs].count("wf.total") == 1
    assert db.jobs() == []
