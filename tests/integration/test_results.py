"""Results (SPEC 5.3, ADR 0124): stored as strict JSON by the finish statement, and
waited for through ``ref.result`` / ``ref.aresult`` / ``app.result``."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from support import wait_until
from ulid import ULID

import venturi
from venturi.errors import (
    ConfigurationError,
    Fail,
    InvalidArgument,
    JobFailed,
    JobNotFound,
    ResultTimeout,
    ResultUnavailable,
)
from venturi.postgres import PostgresBackend
from venturi.refs import JobRef
from venturi.testing import drain, eager
from venturi.types import Status
from venturi.worker import Worker

JSON_VALUES: list[Any] = [
    None,
    True,
    0,
    -(2**63),
    2**63 - 1,
    1.5,
    "text with ünïcode",
    "",
    [],
    [1, "two", None, [3.0]],
    {},
    {"nested": {"list": [1, 2], "null": None}},
]


@pytest.mark.parametrize("value", JSON_VALUES, ids=repr)
def test_each_json_value_comes_back_as_returned(app: venturi.App, value: Any, db: Any) -> None:
    @app.task(kind="res.echo")
    def echo(value: Any) -> Any:
        return value

    ref = echo.delay(value)
    drain(app)

    assert ref.result(timeout=0) == value
    assert app.result(ref.id) == value
    assert ref.status() is Status.COMPLETED
    [row] = db.jobs()
    assert row["result"] == value  # jsonb, decoded by the driver


def test_the_journal_note_stays_human_text(app: venturi.App, db: Any) -> None:
    @app.task(kind="res.words")
    def words() -> dict[str, int]:
        return {"a": 1}

    ref = words.delay()
    drain(app)

    assert ref.result() == {"a": 1}
    assert [e["note"] for e in db.journal(ref.id)] == ['{"a":1}']


class Thing:
    def __str__(self) -> str:
        return "a thing"


def test_a_value_json_cannot_hold_completes_with_its_text_form_and_a_warning(
    app: venturi.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(kind="res.thing")
    def thing() -> Any:
        return Thing()

    ref = thing.delay()
    with caplog.at_level(logging.WARNING, logger="venturi.results"):
        drain(app)

    assert ref.status() is Status.COMPLETED
    assert ref.result() == "a thing"
    assert any(
        "not strict JSON" in r.getMessage() and ref.id in r.getMessage() for r in caplog.records
    )


def test_a_dead_job_raises_job_failed_with_its_id_and_note(app: venturi.App) -> None:
    @app.task(kind="res.fails")
    def fails() -> None:
        raise Fail("no such customer")

    ref = fails.delay()
    drain(app)

    with pytest.raises(JobFailed) as raised:
        ref.result(timeout=5)
    assert raised.value.job_id == ref.id
    assert raised.value.note == "no such customer"


def test_no_end_within_the_timeout_raises_result_timeout(app: venturi.App) -> None:
    @app.task(kind="res.waits")
    def waits() -> None: ...

    ref = waits.delay()

    started = time.monotonic()
    with pytest.raises(ResultTimeout) as raised:
        ref.result(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert isinstance(raised.value, TimeoutError)
    assert raised.value.status == "pending"
    with pytest.raises(ResultTimeout):
        app.result(ref.id, timeout=0)


def test_unknown_and_cleaned_up_ids_raise_job_not_found(app: venturi.App) -> None:
    @app.task(kind="res.gone")
    def gone() -> int:
        return 1

    with pytest.raises(JobNotFound):
        app.result(str(ULID()), timeout=1)
    with pytest.raises(JobNotFound):
        app.status(str(ULID()))
    ref = gone.delay()
    drain(app)
    assert ref.result() == 1
    assert app.cleanup(older_than=timedelta(0)) == 1
    with pytest.raises(JobNotFound):
        ref.result()


def test_a_merged_ref_waits_on_the_surviving_job(app: venturi.App) -> None:
    @app.task(kind="res.dedup", dedup=lambda key: key)
    def dedup(key: str) -> str:
        return f"ran {key}"

    first = dedup.delay("k")
    second = dedup.delay("k")
    assert second.merged and second.id == first.id
    drain(app)

    assert second.result(timeout=5) == "ran k"
    assert first.result() == "ran k"
    # The App a ref waits through takes no part in equality or hashing.
    assert JobRef(first.id) == first and hash(JobRef(first.id)) == hash(first)


def test_a_waiter_is_woken_when_a_worker_finishes_the_job(
    app: venturi.App, start_worker: Callable[..., Worker], db: Any
) -> None:
    release = threading.Event()

    @app.task(kind="res.slow")
    def slow(x: int) -> int:
        release.wait(10)
        return x * 2

    ref = slow.delay(21)
    start_worker()
    threading.Timer(0.3, release.set).start()

    assert ref.result(timeout=10) == 42
    [row] = db.jobs()
    assert row["result_awaited"] is True


def test_a_job_nobody_waits_for_is_never_marked(app: venturi.App, db: Any) -> None:
    @app.task(kind="res.quiet")
    def quiet() -> int:
        return 3

    quiet.delay()
    drain(app)

    [row] = db.jobs()
    assert row["result_awaited"] is False


def test_aresult_waits_without_blocking_the_loop(
    app: venturi.App, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="res.async")
    def double(x: int) -> int:
        time.sleep(0.2)
        return x * 2

    async def main() -> tuple[list[int], int]:
        refs = [await double.adelay(i) for i in range(3)]
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        try:
            results = await asyncio.gather(*(r.aresult(timeout=10) for r in refs))
        finally:
            ticker.cancel()
        return list(results), ticks

    start_worker()
    results, ticks = asyncio.run(main())

    assert results == [0, 2, 4]
    assert ticks > 5


@pytest.mark.parametrize("runs", ["drain", "a threaded worker"])
def test_a_result_over_the_bound_is_not_stored_and_the_job_still_completes(
    app: venturi.App,
    database_url: str,
    prefix: str,
    db: Any,
    runs: str,
    start_worker: Callable[..., Worker],
) -> None:
    small = venturi.App(database_url, prefix=prefix, result_max_bytes=100, set_as_current=False)
    try:

        @small.task(kind="res.big")
        def big(size: int) -> str:
            return "x" * size

        fits = big.delay(50)
        too_big = big.delay(200)
        if runs == "drain":
            drain(small)
        else:
            start_worker(small, kinds=["res.big"])
            fits.result(timeout=20)
            wait_until(lambda: too_big.status() is Status.COMPLETED, timeout=20)

        assert fits.result() == "x" * 50
        assert too_big.status() is Status.COMPLETED
        with pytest.raises(ResultUnavailable) as raised:
            too_big.result()
        assert "202 bytes" in str(raised.value)
        assert db.journal(too_big.id)[-1]["note"] == (
            "result of 202 bytes not stored (result_max_bytes=100)"
        )
    finally:
        small.close()


def test_the_bound_holds_with_a_backend_given_to_the_app(database_url: str, prefix: str) -> None:
    """The bound is applied above the storage boundary, so a ready ``backend=`` (another
    adapter, a test double) stores bounded results too (ADR 0124)."""
    given = PostgresBackend(database_url, prefix=prefix)
    small = venturi.App(backend=given, prefix=prefix, result_max_bytes=10, set_as_current=False)
    try:

        @small.task(kind="res.given")
        def text(size: int) -> str:
            return "x" * size

        fits, too_big = text.delay(8), text.delay(9)
        drain(small)

        assert fits.result() == "x" * 8
        with pytest.raises(ResultUnavailable, match="11 bytes"):
            too_big.result()
    finally:
        given.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "result_max_bytes must not be negative, got -1"),
        (True, "result_max_bytes must be an int, got True"),
        (1.5, "result_max_bytes must be an int, got 1.5"),
    ],
)
def test_a_bad_result_bound_is_refused_when_the_app_is_built(value: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        venturi.App("postgresql://unused", result_max_bytes=value, set_as_current=False)


def test_a_hand_made_ref_says_to_wait_through_the_app(app: venturi.App) -> None:
    with pytest.raises(ConfigurationError, match=r"app\.result"):
        JobRef(str(ULID())).result()


def test_refs_of_an_eager_session_answer_from_the_session(app: venturi.App) -> None:
    @app.task(kind="res.eager")
    def triple(x: int) -> int:
        return 3 * x

    @app.task(kind="res.eager_dead")
    def dies() -> None:
        raise Fail("nope")

    with eager(app):
        ref = triple.delay(2)
        dead = dies.delay()

    assert ref.result(timeout=1) == 6
    assert ref.status() is Status.COMPLETED
    assert dead.status() is Status.DEAD
    with pytest.raises(JobFailed, match="nope"):
        dead.result()
    with pytest.raises(JobNotFound):
        app.result(ref.id)  # nothing was written


def test_a_long_result_leaves_only_its_head_in_the_journal_note(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="res.long")
    def long() -> dict[str, str]:
        return {"text": "x" * 15_000}

    @app.task(kind="res.just_short")
    def just_short() -> str:
        return "y" * 200

    long_ref, short_ref = long.delay(), just_short.delay()
    drain(app)

    assert long_ref.result() == {"text": "x" * 15_000}
    [note] = [e["note"] for e in db.journal(long_ref.id)]
    assert note == '{"text":"' + "x" * 191 + " ... (cut; the full result is stored with the job)"
    assert [e["note"] for e in db.journal(short_ref.id)] == ["y" * 200]
