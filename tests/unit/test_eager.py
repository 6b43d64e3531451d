"""``venturi.testing.eager``: enqueues run their handler inline, with no database (ADR 0120).

Every App here points at a port nothing listens on: a test that reached for
the database would fail with ``BackendUnavailable``. The first test also proves
in a fresh interpreter that eager mode never even loads the driver.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import UNREACHABLE
from ulid import ULID

import venturi
from venturi.errors import (
    ArgumentsMismatch,
    ConfigurationError,
    InvalidDelay,
    InvalidPayload,
    InvalidPriority,
)
from venturi.options import TaskOptions
from venturi.refs import JobRef
from venturi.task import Task
from venturi.task_writes import eager_session
from venturi.testing import DrainLimitReached, EagerLimitReached, eager
from venturi.types import OutcomeKind


@pytest.fixture
def app() -> Iterator[venturi.App]:
    """An App on no database at all; the current App, for default-registry tasks."""
    instance = venturi.App(UNREACHABLE, prefix="t_eager")
    yield instance
    instance.close()


@venturi.task(kind="tests.unit.eager.shared")
def shared(word: str) -> str:
    """A default-registry task: eager through the App it enqueues through (the current one)."""
    return word * 2


def outcomes(session: Any) -> list[tuple[str, int, OutcomeKind]]:
    return [(run.kind, run.run_count, run.outcome.kind) for run in session.runs]


def test_eager_mode_loads_no_database_driver_in_a_fresh_interpreter() -> None:
    probe = textwrap.dedent(
        f"""
        import sys
        import venturi
        from venturi.testing import eager

        app = venturi.App({UNREACHABLE!r}, prefix="t_eager_probe")

        @app.task(kind="probe.add")
        def add(a: int, b: int) -> int:
            return a + b

        with eager(app) as session:
            add.delay(1, b=2)
            add.apply_async((3, 4), countdown=60, connection=object())
            add.delay_many([{{"a": 5, "b": 6}}])
        print([run.outcome.note for run in session.runs])
        print(sorted(m for m in sys.modules if m.startswith(("psycopg", "venturi.postgres"))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )

    assert done.stdout.splitlines() == ["['3', '7', '11']", "[]"]


def test_delay_runs_the_handler_now_and_returns_a_fresh_id_and_the_recorded_run(
    app: venturi.App,
) -> None:
    seen: list[tuple[str | None, int]] = []

    @app.task(kind="e.greet")
    def greet(ctx: venturi.Context, name: str, punctuation: str = "!") -> str:
        seen.append((ctx.job_id, ctx.run_count))
        return f"hello {name}{punctuation}"

    with eager(app) as session:
        ref = greet.delay("ada", punctuation="?")
        assert seen == [(ref.id, 1)]  # it ran before .delay() returned

    assert ref == JobRef(ref.id, merged=False)
    assert str(ULID.from_str(ref.id)) == ref.id
    [run] = session.runs
    assert (run.job_id, run.kind, run.run_count, run.payload) == (
        ref.id,
        "e.greet",
        1,
        {"name": "ada", "punctuation": "?"},
    )
    assert (run.outcome.kind, run.outcome.note, run.is_recorded) == (
        OutcomeKind.COMPLETED,
        "hello ada?",
        True,
    )
    assert session.outcome_of(ref) is run.outcome
    assert session.outcome_of(ref.id) is run.outcome


def test_a_refused_call_raises_the_same_typed_error_and_runs_nothing(app: venturi.App) -> None:
    ran: list[object] = []

    @app.task(kind="e.strict")
    def strict(n: int) -> None:
        ran.append(n)

    with eager(app) as session:
        with pytest.raises(ArgumentsMismatch):
            strict.delay(1, 2)  # type: ignore[call-arg]
        with pytest.raises(InvalidPayload):
            strict.delay(float("nan"))  # type: ignore[arg-type]
        with pytest.raises(InvalidPriority):
            strict.apply_async((1,), priority=7)
        with pytest.raises(InvalidDelay):
            strict.apply_async((1,), countdown=-5)
        with pytest.raises(InvalidDelay):
            strict.apply_async((1,), eta=datetime(2030, 1, 1))  # naive
        with pytest.raises(ArgumentsMismatch):
            strict.delay_many([{"n": 1}, {"m": 2}])  # validated whole before the batch runs

    assert ran == []
    assert session.runs == []


def test_outcomes_follow_the_worker_rules_and_retries_run_at_once_up_to_the_backstop(
    app: venturi.App,
) -> None:
    @app.task(kind="e.flaky", max_failures=3, backoff=timedelta(hours=1))
    def flaky(ctx: venturi.Context) -> str:
        if ctx.run_count < 3:
            raise venturi.Retry(delay=timedelta(days=1))
        return f"ok after {ctx.failure_count} failures"

    @app.task(kind="e.broken", max_failures=3, backoff=timedelta(hours=1))
    def broken() -> None:
        raise ValueError("always")

    @app.task(kind="e.fatal")
    def fatal() -> None:
        raise venturi.Fail("no point retrying")

    with eager(app) as session:
        ok = flaky.delay()
        dead = broken.delay()
        failed = fatal.delay()

    assert outcomes(session) == [
        ("e.flaky", 1, OutcomeKind.RETRIED),
        ("e.flaky", 2, OutcomeKind.RETRIED),
        ("e.flaky", 3, OutcomeKind.COMPLETED),
        ("e.broken", 1, OutcomeKind.RETRIED),
        ("e.broken", 2, OutcomeKind.RETRIED),
        ("e.broken", 3, OutcomeKind.DEAD),
        ("e.fatal", 1, OutcomeKind.DEAD),
    ]
    assert session.outcome_of(ok).note == "ok after 2 failures"
    assert session.runs[3].outcome.note == "ValueError: always"
    assert session.runs[3].outcome.delay == timedelta(hours=1)  # computed, never waited for
    note = session.outcome_of(dead).note
    assert note is not None and note.startswith("backstop reached after 3 failures")
    assert session.outcome_of(failed).note == "no point retrying"


@dataclass
class Progress:
    pages: int


def test_pauses_run_again_at_once_with_the_carry_they_left(app: venturi.App) -> None:
    @app.task(kind="e.crawl", carry=Progress)
    def crawl(ctx: venturi.Context, site: str) -> int:
        progress = ctx.carry or Progress(pages=0)
        ctx.carry = Progress(pages=progress.pages + 1)
        ctx.set_attachment({"site": site, "page": ctx.carry.pages})
        if ctx.carry.pages < 3:
            ctx.pause(timedelta(hours=1))
        return int(ctx.carry.pages)

    with eager(app) as session:
        ref = crawl.delay("example.org")

    assert outcomes(session) == [
        ("e.crawl", 1, OutcomeKind.PAUSED),
        ("e.crawl", 2, OutcomeKind.PAUSED),
        ("e.crawl", 3, OutcomeKind.COMPLETED),
    ]
    assert session.outcome_of(ref).note == "3"
    assert [run.outcome.attachment for run in session.runs] == [
        '{"site":"example.org","page":1}',
        '{"site":"example.org","page":2}',
        '{"site":"example.org","page":3}',
    ]


def test_countdown_eta_dedup_and_connection_do_not_hold_a_call_back(app: venturi.App) -> None:
    @app.task(kind="e.sync", dedup=lambda account: account)
    def sync(account: str) -> str:
        return account

    later = datetime.now(UTC) + timedelta(days=30)
    with eager(app) as session:
        refs = [
            sync.apply_async(("a",), countdown=timedelta(hours=2)),
            sync.apply_async(("a",), eta=later),
            sync.apply_async(("a",), dedup_key="same"),
            sync.apply_async(("a",), dedup_key="same", connection=object()),
        ]

    assert [run.job_id for run in session.runs] == [ref.id for ref in refs]
    assert len({ref.id for ref in refs}) == 4
    assert not any(ref.merged for ref in refs)
    assert {run.outcome.kind for run in session.runs} == {OutcomeKind.COMPLETED}


def test_delay_many_runs_each_item_in_order_and_returns_their_refs(app: venturi.App) -> None:
    @app.task(kind="e.square")
    def square(n: int) -> int:
        return n * n

    with eager(app) as session:
        refs = square.delay_many([{"n": 2}, [3], {"n": 4}], batch_size=2)

    assert [session.outcome_of(ref).note for ref in refs] == ["4", "9", "16"]
    assert [run.payload for run in session.runs] == [{"n": 2}, {"n": 3}, {"n": 4}]


def test_a_default_registry_task_runs_inline_through_the_current_app(app: venturi.App) -> None:
    with eager(app) as session:
        ref = shared.delay("ab")

    assert session.outcome_of(ref).note == "abab"


def test_jobs_enqueued_by_a_handler_run_inline_depth_first(app: venturi.App) -> None:
    order: list[str] = []

    @app.task(kind="e.child")
    def child(n: int) -> None:
        order.append(f"child {n}")

    @app.task(kind="e.parent")
    def parent() -> str:
        order.append("parent starts")
        refs = child.delay_many([{"n": 1}, {"n": 2}])
        order.append("parent ends")
        return ",".join(ref.id for ref in refs)

    with eager(app) as session:
        ref = parent.delay()

    assert order == ["parent starts", "child 1", "child 2", "parent ends"]
    # A run is recorded when it ends: the children's before their parent's.
    assert [run.kind for run in session.runs] == ["e.child", "e.child", "e.parent"]
    assert session.outcome_of(ref).note == ",".join(run.job_id for run in session.runs[:2])


def test_a_task_that_enqueues_itself_forever_fails_the_test_not_the_handler(
    app: venturi.App,
) -> None:
    caught: list[BaseException] = []

    @app.task(kind="e.recurse")
    def recurse(depth: int) -> None:
        try:
            recurse.delay(depth + 1)
        except Exception as exc:  # what a handler's own error handling looks like
            caught.append(exc)
            raise

    with eager(app, max_depth=5) as session, pytest.raises(EagerLimitReached) as raised:
        recurse.delay(0)

    assert isinstance(raised.value, DrainLimitReached)
    assert "5 deep" in str(raised.value)
    assert caught == []  # the limit went past every handler, none was retried
    assert session.runs == []  # none of the five runs came to an end


def test_a_job_that_pauses_forever_stops_at_max_runs(app: venturi.App) -> None:
    @app.task(kind="e.forever")
    def forever(ctx: venturi.Context) -> None:
        ctx.pause()

    @app.task(kind="e.fine")
    def fine() -> None: ...

    with eager(app, max_runs=25) as session:
        with pytest.raises(EagerLimitReached, match="25 runs"):
            forever.delay()
        fine.delay()  # the budget is per job enqueued from the test

    assert [run.kind for run in session.runs] == ["e.forever"] * 25 + ["e.fine"]


def test_the_block_ends_eager_mode_and_nested_blocks_restore_the_outer_one(
    app: venturi.App,
) -> None:
    other = venturi.App(UNREACHABLE, prefix="t_eager_other", set_as_current=False)

    @app.task(kind="e.mine")
    def mine() -> None: ...

    @other.task(kind="e.theirs")
    def theirs() -> None: ...

    with eager(app) as outer:
        with eager(other) as inner:
            theirs.delay()
        mine.delay()

    assert [run.kind for run in outer.runs] == ["e.mine"]
    assert [run.kind for run in inner.runs] == ["e.theirs"]
    assert eager_session.get() is None


def test_a_task_no_registry_of_the_app_serves_is_refused(app: venturi.App) -> None:
    stray: Task[[], None] = Task(lambda: None, TaskOptions.parse(kind="e.stray"), app=app)

    with eager(app), pytest.raises(ConfigurationError) as raised:
        stray.delay()

    assert "no task of this App serves kind 'e.stray'" in str(raised.value)


def test_async_enqueue_inside_eager_runs_inline_and_touches_no_database(app: venturi.App) -> None:
    import asyncio

    @app.task(kind="eager.async_enqueue")
    def double(n: int) -> int:
        return n * 2

    async def enqueue() -> list[JobRef]:
        first = await double.adelay(1)
        rest = await double.adelay_many([{"n": 2}, {"n": 3}])
        return [first, *rest]

    with eager(app) as session:
        refs = asyncio.run(enqueue())
    assert [session.outcome_of(ref).note for ref in refs] == ["2", "4", "6"]
    assert [run.outcome.kind for run in session.runs] == [OutcomeKind.COMPLETED] * 3
