"""The step log's rules without a database (venturi/step_log.py, ADR 0137): names,
recorded values, sleeps and waits over the in-memory store that ``perform``, direct
calls and ``eager`` use; the database's verbs are held by the contract suite."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from venturi.durable import NEVER, StepKind, validate_event_name
from venturi.errors import ClaimLost, EventTimeout, InvalidArgument, InvalidDelay, InvalidPayload
from venturi.step_log import MemorySteps, StepLog, current_step
from venturi.types import Claim


def log(store: MemorySteps, run: int = 1, max_bytes: int = 1000) -> StepLog:
    return StepLog(store, Claim("J1", "w:1", run), result_max_bytes=max_bytes)


def test_a_recorded_step_is_returned_without_calling_its_function_again() -> None:
    store = MemorySteps()
    calls: list[int] = []
    assert log(store).step("a", lambda x: calls.append(x) or (x, x), 3) == [3, 3]
    assert log(store, run=2).step("a", calls.append, 4) == [3, 3]
    assert calls == [3]


def test_a_step_that_raises_records_nothing() -> None:
    store = MemorySteps()

    def boom() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        log(store).step("a", boom)
    assert store.steps == {}
    assert log(store, run=2).step("a", lambda: 7) == 7


def test_names_are_unique_in_a_run_across_steps_not_across_kinds() -> None:
    run = log(MemorySteps())
    run.step("a", lambda: 1)
    with pytest.raises(ValueError, match="given twice"):
        run.step("a", lambda: 2)
    assert run.sleep(0) is None
    assert run.wait_for("a", 5)[0] is False  # a wait may share a step's name
    with pytest.raises(ValueError, match="given twice"):
        run.wait_for("a", 5)


@pytest.mark.parametrize("value", [float("nan"), {1}, object(), "x" * 2000])
def test_a_result_that_is_not_strict_json_or_too_large_records_nothing(value: Any) -> None:
    store = MemorySteps()
    with pytest.raises(InvalidPayload, match="step 'a'"):
        log(store).step("a", lambda: value)
    assert store.steps == {}


@pytest.mark.parametrize("name", ["", "x" * 201, 3, None, "a\x00b"])
def test_bad_names_are_invalid_arguments(name: Any) -> None:
    with pytest.raises(InvalidArgument):
        log(MemorySteps()).step(name, lambda: 1)
    with pytest.raises(InvalidArgument):
        validate_event_name(name)


@pytest.mark.parametrize(
    "duration",
    [
        -1,
        timedelta(seconds=-1),
        "1s",
        None,
        True,
        float("nan"),
        float("inf"),
        1e300,
        timedelta(days=400_000),
    ],
)
def test_bad_sleeps_and_timeouts_are_refused(duration: Any) -> None:
    with pytest.raises(InvalidDelay):
        log(MemorySteps()).sleep(duration)
    if duration is not None:
        with pytest.raises(InvalidDelay):
            log(MemorySteps()).wait_for("e", duration)


def test_a_sleep_pauses_until_its_wake_time_and_a_later_run_passes_it() -> None:
    store = MemorySteps(fast_clock=True)
    until = log(store).sleep(timedelta(hours=1))
    assert until is not None and until > datetime.now(UTC) + timedelta(minutes=59)
    assert log(store, run=2).sleep(timedelta(hours=1)) is None  # the fast clock passed it
    slow = MemorySteps()
    log(slow).sleep(3600)
    assert log(slow, run=2).sleep(3600) == slow.steps[(StepKind.SLEEP, "1")].wake_at


def test_a_wait_without_a_timeout_pauses_until_never_and_one_that_timed_out_stays_so() -> None:
    store = MemorySteps(fast_clock=True)
    assert log(store).wait_for("forever", None) == (False, None, NEVER)
    assert log(store, run=2).wait_for("forever", None) == (False, None, NEVER)
    is_sent, _, until = log(store, run=3).wait_for("soon", 10)
    assert not is_sent and until < NEVER
    with pytest.raises(EventTimeout):
        log(store, run=4).wait_for("soon", 10)
    assert (StepKind.TIMEOUT, "soon") in store.steps
    with pytest.raises(EventTimeout):
        log(store, run=5).wait_for("soon", 10)


def test_a_fenced_out_record_is_claim_lost() -> None:
    class Fenced(MemorySteps):
        def record_step(self, claim: Claim, step: Any) -> None:
            return None

    with pytest.raises(ClaimLost, match="lost its claim"):
        log(Fenced()).step("a", lambda: 1)


def test_step_key_names_the_step_running_in_each_task() -> None:
    run = log(MemorySteps())

    async def key_of(name: str) -> str | None:
        await asyncio.sleep(0.01)
        return current_step.get() and f"J1:{current_step.get()}"

    async def both() -> list[Any]:
        return list(await asyncio.gather(run.astep("a", key_of, "a"), run.astep("b", key_of, "b")))

    assert asyncio.run(both()) == ["J1:a", "J1:b"]
    assert current_step.get() is None


def test_a_steps_function_may_take_keywords_named_name_and_fn() -> None:
    def call(name: str, fn: str) -> str:
        return f"{name}/{fn}"

    assert log(MemorySteps()).step("a", call, name="n", fn="f") == "n/f"
    assert asyncio.run(log(MemorySteps()).astep("a", call, name="n", fn="f")) == "n/f"
