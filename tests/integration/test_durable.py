"""Durable steps, sleeps and events on a real database (SPEC 6.1, ADR 0137).

A step runs once per job, ever: a later run (retry, pause, operator retry) gets
its recorded value without calling it; a step that raises records nothing; a
zombie run's step is fenced out. Sleeps and waits end the run paused with the
wake time recorded; ``app.send`` wakes a waiting job at once, once per name,
refused for unknown and finished jobs and bad input with nothing written.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from support import empty_prefix, row, wait_until

import venturi
from venturi.cli import main
from venturi.durable import NewDurableStep, StepKind
from venturi.errors import (
    ClaimLost,
    ConfigurationError,
    EventAlreadySent,
    EventTimeout,
    InvalidArgument,
    InvalidPayload,
    InvalidState,
    JobFinished,
    JobNotFound,
    Retry,
)
from venturi.step_log import StepLog
from venturi.testing import drain
from venturi.types import OutcomeKind
from venturi.worker import Worker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def steps_of(db: Any, job_id: str) -> list[tuple[str, str, int]]:
    return [
        (r["kind"], r["name"], r["run_no"])
        for r in db.all(
            "SELECT kind, name, run_no FROM {{prefix}}_checkpoints WHERE job_id = %s "
            "ORDER BY position",
            (job_id,),
        )
    ]


def paused_once(db: Any, job_id: str) -> bool:
    job = row(db, job_id)
    return bool(job["run_count"] == 1 and job["status"] == "pending")


def test_a_step_runs_once_across_retries_and_its_recorded_value_is_returned(
    app: venturi.App, db: Any
) -> None:
    calls: list[str] = []
    seen: list[Any] = []

    @app.task(kind="durable.retrying", max_failures=5)
    def retrying(ctx: venturi.Context, order: int) -> dict[str, Any]:
        charge = ctx.step("charge", lambda: calls.append("charge") or {"id": f"ch-{order}"})
        seen.append(charge)
        if ctx.run_count < 3:
            raise Retry(delay=timedelta(0))
        label = ctx.step("label", lambda: calls.append("label") or (1, 2))
        return {"charge": charge, "label": label}

    ref = retrying.delay(7)
    runs = drain(app)
    assert [r.outcome.kind for r in runs] == [
        OutcomeKind.RETRIED,
        OutcomeKind.RETRIED,
        OutcomeKind.COMPLETED,
    ]
    assert calls == ["charge", "label"]
    assert seen == [{"id": "ch-7"}] * 3
    assert ref.result(timeout=5) == {"charge": {"id": "ch-7"}, "label": [1, 2]}
    assert steps_of(db, ref.id) == [("step", "charge", 1), ("step", "label", 3)]
    detail = app.job(ref.id)
    assert [(s.name, s.run_no) for s in detail.steps] == [("charge", 1), ("label", 3)]
    assert detail.steps[0].recorded_at <= detail.steps[1].recorded_at
    assert detail.journal  # the existing fields are kept


def test_a_step_that_raises_records_nothing_and_runs_again(app: venturi.App, db: Any) -> None:
    attempts: list[int] = []

    @app.task(kind="durable.flaky", max_failures=3)
    def flaky(ctx: venturi.Context) -> int:
        def once() -> int:
            attempts.append(ctx.run_count)
            if ctx.run_count == 1:
                raise ConnectionError("card service down")
            return 42

        return int(ctx.step("charge", once))

    ref = flaky.delay()
    runs = drain(app, include_scheduled=True)
    assert [r.outcome.kind for r in runs] == [OutcomeKind.RETRIED, OutcomeKind.COMPLETED]
    assert attempts == [1, 2]
    assert steps_of(db, ref.id) == [("step", "charge", 2)]


def test_a_name_twice_in_one_run_raises_value_error(app: venturi.App, db: Any) -> None:
    @app.task(kind="durable.twice", max_failures=1)
    def twice(ctx: venturi.Context) -> None:
        ctx.step("a", lambda: 1)
        ctx.step("a", lambda: 2)

    ref = twice.delay()
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.DEAD
    assert "ValueError" in (run.outcome.note or "")
    assert "given twice" in (run.outcome.note or "")
    assert steps_of(db, ref.id) == [("step", "a", 1)]


@pytest.mark.parametrize(
    ("value", "match"),
    [(float("nan"), "not strict JSON|NaN"), ({1, 2}, "set|JSON"), ("x" * 5000, "over the limit")],
)
def test_a_result_that_is_not_strict_json_or_too_large_is_refused_at_the_step(
    database_url: str, prefix: str, db: Any, value: Any, match: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        empty_prefix(conn, prefix)
    app = venturi.App(database_url, prefix=prefix, result_max_bytes=1000, set_as_current=False)
    errors: list[BaseException] = []
    try:

        @app.task(kind="durable.bad_result", max_failures=1)
        def bad(ctx: venturi.Context) -> None:
            try:
                ctx.step("bad", lambda: value)
            except InvalidPayload as exc:
                errors.append(exc)
                raise

        ref = bad.delay()
        [run] = drain(app)
        assert run.outcome.kind is OutcomeKind.DEAD
        assert len(errors) == 1
        assert "step 'bad'" in str(errors[0])
        assert re.search(match, str(errors[0]))
        assert steps_of(db, ref.id) == []
    finally:
        app.close()


@pytest.mark.parametrize("name", ["", "x" * 201, 12, "nul\x00"])
def test_a_bad_step_name_is_refused(app: venturi.App, db: Any, name: Any) -> None:
    called: list[int] = []

    @app.task(kind="durable.bad_name", max_failures=1)
    def bad(ctx: venturi.Context) -> None:
        ctx.step(name, lambda: called.append(1))

    ref = bad.delay()
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.DEAD
    assert "InvalidArgument" in (run.outcome.note or "")
    assert called == []
    assert steps_of(db, ref.id) == []


def test_a_zombie_runs_step_is_fenced_out_and_the_claim_holders_step_wins(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="durable.zombie")
    def noop() -> None: ...

    ref = noop.delay()
    backend = app.backend
    [first] = backend.claim(
        kinds=["durable.zombie"], limit=1, worker_id="zombie:1", lease=timedelta(seconds=30)
    )
    # Its lease is lost: the job is recovered and claimed again by another worker.
    db.all(
        "UPDATE {{prefix}}_jobs SET status = 'pending', claimed_by = NULL, "
        "claim_expires_at = NULL WHERE id = %s RETURNING id",
        (ref.id,),
    )
    [second] = backend.claim(
        kinds=["durable.zombie"], limit=1, worker_id="holder:2", lease=timedelta(seconds=30)
    )
    assert second.claim.run_count == first.claim.run_count + 1
    zombie = backend.record_step(first.claim, NewDurableStep(StepKind.STEP, "charge", '"zombie"'))
    assert zombie is None
    holder = backend.record_step(second.claim, NewDurableStep(StepKind.STEP, "charge", '"holder"'))
    assert holder is not None and holder.run_no == second.claim.run_count
    assert (
        db.scalar("SELECT result::text FROM {{prefix}}_checkpoints WHERE job_id = %s", (ref.id,))
        == '"holder"'
    )
    # The run's own step log turns the fenced write into ClaimLost.
    log = StepLog(backend, first.claim, result_max_bytes=1000)
    with pytest.raises(ClaimLost, match="lost its claim"):
        log.step("other", lambda: 1)


def test_sleep_pauses_until_the_recorded_wake_time_and_the_next_run_passes_it(
    app: venturi.App, db: Any
) -> None:
    calls: list[str] = []

    @app.task(kind="durable.sleeper")
    def sleeper(ctx: venturi.Context) -> str:
        ctx.step("before", lambda: calls.append("before"))
        ctx.sleep(timedelta(seconds=0.5))
        ctx.step("after", lambda: calls.append("after"))
        return "done"

    ref = sleeper.delay()
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.PAUSED
    job = row(db, ref.id)
    wake = db.scalar(
        "SELECT wake_at FROM {{prefix}}_checkpoints WHERE job_id = %s AND kind = 'sleep'",
        (ref.id,),
    )
    assert job["status"] == "pending" and job["visible_at"] == wake
    assert drain(app) == []  # not due yet
    time.sleep(0.6)
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert calls == ["before", "after"]
    assert steps_of(db, ref.id) == [("step", "before", 1), ("sleep", "1", 1), ("step", "after", 2)]


def test_a_run_woken_early_pauses_again_until_the_sleeps_wake_time(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="durable.early")
    def early(ctx: venturi.Context) -> str:
        ctx.sleep(3600)
        return "late"

    ref = early.delay()
    [run] = drain(app)
    wake = row(db, ref.id)["visible_at"]
    db.all("UPDATE {{prefix}}_jobs SET visible_at = now() WHERE id = %s RETURNING id", (ref.id,))
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.PAUSED
    assert row(db, ref.id)["visible_at"] == wake
    [run] = drain(app, include_scheduled=True)  # drain's horizon: the sleep is over
    assert run.outcome.kind is OutcomeKind.COMPLETED


def test_wait_for_pauses_and_send_wakes_it_with_the_payload(app: venturi.App, db: Any) -> None:
    @app.task(kind="durable.approve")
    def approve(ctx: venturi.Context) -> Any:
        return ctx.wait_for("approved", timeout=timedelta(days=2))

    ref = approve.delay()
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.PAUSED
    assert drain(app) == []
    app.send(ref.id, "approved", {"by": "ana"})
    assert row(db, ref.id)["visible_at"] <= db.scalar("SELECT now()")
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert ref.result(timeout=5) == {"by": "ana"}
    detail = app.job(ref.id)
    assert [(e.name, e.payload) for e in detail.events] == [("approved", '{"by": "ana"}')]
    assert [(s.kind, s.name) for s in detail.steps] == [(StepKind.WAIT, "approved")]


def test_an_event_sent_before_the_wait_is_returned_at_once(app: venturi.App) -> None:
    @app.task(kind="durable.early_event")
    def early(ctx: venturi.Context) -> Any:
        return ctx.wait_for("go")

    ref = early.apply_async(countdown=3600)
    ref.send("go", [1, 2])
    [run] = drain(app, include_scheduled=True)
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert ref.result(timeout=5) == [1, 2]


def test_wait_for_times_out_with_event_timeout_in_every_later_run(
    app: venturi.App, db: Any
) -> None:
    timeouts: list[int] = []

    @app.task(kind="durable.timeout", max_failures=3)
    def waits(ctx: venturi.Context) -> str:
        try:
            ctx.wait_for("approved", timeout=0.3)
        except EventTimeout:
            timeouts.append(ctx.run_count)
            if ctx.run_count == 2:
                raise Retry(delay=timedelta(0)) from None
            return "timed out"
        return "approved"

    ref = waits.delay()
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.PAUSED
    time.sleep(0.4)
    runs = drain(app)
    assert [r.outcome.kind for r in runs][:1] == [OutcomeKind.RETRIED]
    if len(runs) == 1:
        app.send(ref.id, "approved")  # too late: the recorded timeout stands
        runs += drain(app, include_scheduled=True)
    assert runs[-1].outcome.kind is OutcomeKind.COMPLETED
    assert ref.result(timeout=5) == "timed out"
    assert timeouts == [2, 3]
    assert ("timeout", "approved", 2) in steps_of(db, ref.id)


def test_send_refuses_unknown_finished_repeated_and_bad_input_writing_nothing(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="durable.target")
    def target(ctx: venturi.Context) -> Any:
        return ctx.wait_for("e")

    ref = target.delay()
    with pytest.raises(JobNotFound):
        app.send("01ARZ3NDEKTSV4RRFFQ69G5FAV", "e")
    with pytest.raises(JobNotFound):
        app.send("bad\x00id", "e")
    for name in ["", "x" * 201, 5, "a\x00"]:
        with pytest.raises(InvalidArgument):
            app.send(ref.id, name)
    with pytest.raises(InvalidPayload):
        app.send(ref.id, "e", {"x": float("inf")})
    with pytest.raises(InvalidPayload, match="over the limit"):
        app.send(ref.id, "e", "x" * 70_000)
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0
    app.send(ref.id, "e", 1)
    with pytest.raises(EventAlreadySent):
        app.send(ref.id, "e", 2)
    drain(app)
    assert ref.result(timeout=5) == 1
    with pytest.raises(JobFinished, match="completed"):
        app.send(ref.id, "other")
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 1


def test_send_inside_a_transaction_exists_exactly_when_it_commits(
    app: venturi.App, db: Any, database_url: str
) -> None:
    @app.task(kind="durable.tx")
    def target(ctx: venturi.Context) -> Any:
        return ctx.wait_for("e")

    ref = target.delay()
    with psycopg.connect(database_url) as conn:
        app.send(ref.id, "e", "rolled back", connection=conn)
        conn.rollback()
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0
    with psycopg.connect(database_url) as conn:
        app.send(ref.id, "e", "kept", connection=conn)
        assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0
        conn.commit()
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 1
    with pytest.raises(InvalidArgument, match=r"psycopg\.Connection"):
        app.send(ref.id, "f", connection=object())


def test_an_event_sent_while_the_run_decides_to_wait_still_wakes_it(
    app: venturi.App, db: Any
) -> None:
    """The race: the run found no event, then one is sent, then the run ends paused."""
    sent: list[bool] = []

    @app.task(kind="durable.race")
    def race(ctx: venturi.Context) -> Any:
        try:
            return ctx.wait_for("go", timeout=timedelta(days=1))
        finally:
            if not sent:
                sent.append(True)
                app.send(ctx.job_id or "", "go", "late")  # between "no event" and the finish

    ref = race.delay()
    # The paused finish left it visible now (not at the day-long deadline): drain,
    # which runs what is due, runs it again at once and it gets the event.
    runs = drain(app)
    assert [r.outcome.kind for r in runs] == [OutcomeKind.PAUSED, OutcomeKind.COMPLETED]
    assert ref.result(timeout=5) == "late"
    assert row(db, ref.id)["woken_run"] == 1


def test_a_worker_wakes_at_the_send_not_at_the_next_poll(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="durable.notify")
    def waits(ctx: venturi.Context) -> Any:
        return ctx.wait_for("go")

    ref = waits.delay()
    start_worker(poll_interval=30.0)
    wait_until(lambda: paused_once(db, ref.id))
    time.sleep(0.2)
    started = time.monotonic()
    app.send(ref.id, "go", "now")
    assert ref.result(timeout=10) == "now"
    assert time.monotonic() - started < 5  # the poll is 30 s


def test_retry_resumes_after_the_last_step_or_starts_over_with_reset_steps(
    app: venturi.App, db: Any
) -> None:
    calls: list[str] = []

    @app.task(kind="durable.dead", max_failures=1)
    def dies(ctx: venturi.Context) -> str:
        ctx.step("one", lambda: calls.append("one"))
        ctx.step("two", lambda: calls.append("two"))
        if len(calls) < 4:
            raise RuntimeError("boom")
        return "ok"

    ref = dies.delay()
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.DEAD
    assert calls == ["one", "two"]
    app.retry(ref.id)
    [run] = drain(app)
    assert run.outcome.kind is OutcomeKind.DEAD
    assert calls == ["one", "two"]  # resumed after its last step
    app.retry(ref.id, reset_steps=True)
    assert steps_of(db, ref.id) == []
    [run] = drain(app)
    assert calls == ["one", "two", "one", "two"]
    assert run.outcome.kind is OutcomeKind.COMPLETED
    with pytest.raises(InvalidState):
        app.retry(ref.id, reset_steps=True)
    assert len(steps_of(db, ref.id)) == 2  # nothing deleted by the refused retry
    with pytest.raises(JobNotFound):
        app.retry("01ARZ3NDEKTSV4RRFFQ69G5FAV", reset_steps=True)


def test_steps_and_events_go_with_their_job_at_cleanup(app: venturi.App, db: Any) -> None:
    @app.task(kind="durable.cleanup")
    def done(ctx: venturi.Context) -> Any:
        ctx.step("s", lambda: 1)
        return ctx.wait_for("e")

    ref = done.delay()
    ref.send("e")
    drain(app)
    assert app.cleanup(older_than=timedelta(0)) == 1
    assert db.scalar("SELECT count(*) FROM {{prefix}}_checkpoints") == 0
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0


@pytest.mark.anyio
async def test_async_handlers_use_astep_asleep_and_await_for(app: venturi.App, db: Any) -> None:
    calls: list[str] = []

    async def charge(order: int) -> dict[str, int]:
        calls.append("charge")
        return {"order": order}

    @app.task(kind="durable.async")
    async def fulfil(ctx: venturi.Context, order: int) -> Any:
        charged = await ctx.astep("charge", charge, order)
        key = await ctx.astep("key", lambda: ctx.step_key)
        await ctx.asleep(0)
        approval = await ctx.await_for("approved", timeout=60)
        return {"charge": charged, "key": key, "by": approval["by"]}

    ref = fulfil.delay(3)
    worker = Worker(app, concurrency=2, poll_interval=0.2)
    worker.start()
    try:
        wait_until(lambda: paused_once(db, ref.id))
        await ref.asend("approved", {"by": "ana"})
        result = await ref.aresult(timeout=10)
    finally:
        worker.stop(grace=5)
    assert result == {"charge": {"order": 3}, "key": f"{ref.id}:key", "by": "ana"}
    assert calls == ["charge"]
    assert [k for k, _, _ in steps_of(db, ref.id)] == ["step", "step", "sleep", "wait"]


def test_jobs_show_prints_the_steps_and_events_and_retry_reset_steps(
    app: venturi.App, database_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    @app.task(kind="durable.shown", max_failures=1)
    def shown(ctx: venturi.Context) -> None:
        ctx.step("charge", lambda: {"id": "ch_1"})
        ctx.wait_for("approved")
        raise RuntimeError("no label printer")

    ref = shown.delay()
    drain(app)
    ref.send("approved", {"by": "ana"})
    drain(app)
    options = ["--database-url", database_url, "--prefix", prefix]
    assert main(["jobs", "show", ref.id, *options]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = out[out.index("steps:") + 1 :]
    assert steps[0].split() == ["STEP", "KIND", "RUN", "RECORDED", "VALUE"]
    assert steps[1].split()[:3] == ["charge", "step", "1"]
    assert steps[1].endswith('{"id": "ch_1"}')
    assert steps[2].split()[:3] == ["approved", "wait", "1"]
    events = out[out.index("events:") + 1 :]
    assert events[1].startswith("approved") and events[1].endswith('{"by": "ana"}')
    assert main(["jobs", "show", ref.id, "--json", *options]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["kind"], s["run_no"]) for s in as_json["steps"]] == [
        ("charge", "step", 1),
        ("approved", "wait", 1),
    ]
    assert as_json["steps"][0]["result"] == {"id": "ch_1"}
    assert as_json["events"][0]["payload"] == {"by": "ana"}
    assert "journal" in as_json and "job" in as_json

    assert main(["jobs", "retry", ref.id, "--reset-steps", *options]) == 0
    capsys.readouterr()
    assert app.job(ref.id).steps == ()
    assert main(["jobs", "retry", "--kind", "durable.shown", "--reset-steps", *options]) != 0


def test_a_durable_chain_member_resumes_and_hands_its_result_on(app: venturi.App) -> None:
    calls: list[str] = []

    @app.task(kind="durable.first")
    def first() -> int:
        return 20

    @app.task(kind="durable.member", max_failures=3)
    def member(ctx: venturi.Context, n: int) -> int:
        doubled = int(ctx.step("double", lambda: calls.append("double") or n * 2))
        if ctx.run_count == 1:
            raise Retry(delay=timedelta(0))
        approval = ctx.wait_for("approved", timeout=60)
        return doubled + int(approval)

    @app.task(kind="durable.last")
    def last(n: int) -> int:
        return n + 1

    ref = venturi.chain(first.s(), member.s(), last.s()).delay()
    drain(app)
    [waiting] = [j for j in app.jobs(kind="durable.member").jobs]
    app.send(waiting.id, "approved", 2)
    drain(app)
    assert ref.result(timeout=5) == 43
    assert calls == ["double"]


def test_under_pgbouncer_transaction_mode_steps_and_sends_work(
    database_url: str, prefix: str, app: venturi.App
) -> None:
    from contract.pgbouncer import PgBouncer, require_pgbouncer

    require_pgbouncer()
    bouncer = PgBouncer(database_url, pool_size=2).start()
    pooled = venturi.App(bouncer.url, prefix=prefix, transaction_pooling=True, set_as_current=False)
    calls: list[int] = []
    try:

        @pooled.task(kind="durable.pgb", max_failures=10)
        def through(ctx: venturi.Context) -> Any:
            for i in range(8):  # more than psycopg's prepare threshold, over two sessions
                ctx.step(f"page-{i}", lambda i=i: calls.append(i) or i)
            if ctx.run_count < 3:
                raise Retry(delay=timedelta(0))
            return ctx.wait_for("go", timeout=60)

        ref = through.delay()
        drain(pooled)
        pooled.send(ref.id, "go", "ok")
        with pytest.raises(EventAlreadySent):
            pooled.send(ref.id, "go", "again")
        drain(pooled)
        assert ref.result(timeout=5) == "ok"
        assert calls == list(range(8))
        assert [s.name for s in pooled.job(ref.id).steps][:8] == [f"page-{i}" for i in range(8)]
    finally:
        pooled.close()
        bouncer.close()


def test_eager_keeps_steps_in_memory_sleeps_pass_and_waits_time_out(
    app: venturi.App, db: Any
) -> None:
    from venturi.testing import eager

    calls: list[str] = []

    @app.task(kind="durable.eager", max_failures=3)
    def fulfil(ctx: venturi.Context, order: int) -> Any:
        charge = ctx.step("charge", lambda: calls.append("charge") or f"ch-{order}")
        if ctx.run_count == 1:
            raise Retry(delay=timedelta(hours=1))
        ctx.sleep(timedelta(hours=1))
        try:
            approval = ctx.wait_for("approved", timeout=timedelta(days=2))
        except EventTimeout:
            approval = "timed out"
        return [charge, approval, ctx.run_count]

    with eager(app) as session:
        ref = fulfil.delay(5)
        with pytest.raises(JobFinished):
            ref.send("approved")
    assert session.result(ref.id) == ["ch-5", "timed out", 4]
    assert calls == ["charge"]
    assert [r.outcome.kind for r in session.runs] == [
        OutcomeKind.RETRIED,
        OutcomeKind.PAUSED,
        OutcomeKind.PAUSED,
        OutcomeKind.COMPLETED,
    ]
    assert db.scalar("SELECT count(*) FROM {{prefix}}_checkpoints") == 0  # nothing written


def test_a_ref_that_knows_no_app_cannot_send() -> None:
    with pytest.raises(ConfigurationError, match=r"app\.send\(job_id"):
        venturi.JobRef("01ARZ3NDEKTSV4RRFFQ69G5FAV").send("e")


def test_perform_and_direct_calls_run_steps_in_memory(app: venturi.App) -> None:
    from venturi.testing import perform

    @app.task(kind="durable.perform")
    def handler(ctx: venturi.Context) -> Any:
        a = ctx.step("a", lambda: (1, 2))
        key = ctx.step("key", lambda: ctx.step_key)
        ctx.sleep(5)
        return [a, key]

    outcome = perform(handler)
    assert outcome.kind is OutcomeKind.PAUSED and outcome.eta is not None
    outside = venturi.Context(job_id=None, kind="k", run_count=0, failure_count=0)
    with pytest.raises(RuntimeError, match="step_key"):
        _ = outside.step_key
    assert outside.step("k", lambda: outside.step_key) == "None:k"
