"""What ``ctx.step``, ``ctx.sleep`` and ``ctx.wait_for`` do (ADR 0137, SPEC 6.1).

A run's ``StepLog`` reads the job's recorded steps and events once, at its first
durable call (a job's first run has none recorded, so it reads nothing until a
``wait_for`` needs the events), then answers each call from what it read: a
step recorded by an earlier run returns its recorded value without calling its
function; a new one calls it and records its strict-JSON result, fenced on the
claim, in one statement before returning it. Every durable call of a run has a
name unique in the run (sleeps are numbered in call order), so a later run meets
the same names in the same order.

``ctx.sleep`` and ``ctx.wait_for`` record when they end (the wake time, the
deadline) and end the run ``paused`` until then; no thread is held meanwhile.
A later run passes a sleep whose wake time has come, returns an event that was
sent, and raises ``EventTimeout`` for a wait whose deadline passed (recorded
too, so it times out the same way in every later run).

Outside a worker (a direct call, ``venturi.testing.perform``) and under
``venturi.testing.eager`` the log is kept in memory (``MemorySteps``).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from venturi.durable import (
    NEVER,
    DurableState,
    NewDurableStep,
    RecordedStep,
    SentEvent,
    StepKind,
    validate_event_name,
    validate_step_name,
)
from venturi.errors import ClaimLost, EventTimeout, InvalidDelay
from venturi.serialization import decode_json, encode_json
from venturi.types import Claim

__all__ = ["MAX_DURATION", "MemorySteps", "StepLog", "StepSource", "StepStore", "current_step"]

#: Longest sleep or wait timeout: a wake time a thousand years ahead is still a
#: ``datetime`` (and comes before ``NEVER``).
MAX_DURATION = timedelta(days=365_000)
#: The name of the step whose function runs now in this thread or task (``ctx.step_key``).
current_step: ContextVar[str | None] = ContextVar("venturi_current_step", default=None)


class StepStore(Protocol):
    """What a step log needs of storage: the two ``Durable`` verbs a run uses."""

    def load_steps(self, job_id: str) -> DurableState: ...

    def record_step(self, claim: Claim, step: NewDurableStep) -> RecordedStep | None: ...


@dataclass
class MemorySteps:
    """A ``StepStore`` in memory, for one job: ``perform``, direct calls and ``eager``.

    With ``fast_clock`` (``eager``, which reruns a paused job at once), each load
    reads a clock past every wake time recorded so far: a later run passes its
    sleeps and times out its waits, as the database's clock would have by then.
    """

    fast_clock: bool = False
    steps: dict[tuple[StepKind, str], RecordedStep] = field(default_factory=dict)

    def load_steps(self, job_id: str) -> DurableState:
        now = datetime.now(UTC)
        if self.fast_clock:
            wakes = [s.wake_at for s in self.steps.values() if s.wake_at not in (None, NEVER)]
            now = max([now, *(w for w in wakes if w is not None)])
        return DurableState(tuple(self.steps.values()), (), now)

    def record_step(self, claim: Claim, step: NewDurableStep) -> RecordedStep | None:
        key = (step.kind, step.name)
        if key in self.steps:
            return None
        now = datetime.now(UTC)
        wake = None if step.wake_after is None else now + step.wake_after
        recorded = RecordedStep(step.kind, step.name, claim.run_count, now, step.result, wake)
        self.steps[key] = recorded
        return recorded


@dataclass(frozen=True, slots=True)
class StepSource:
    """Makes each run's ``StepLog`` on ``store`` (the App's backend, in a worker).

    ``result_max_bytes`` bounds a step's recorded value as results are bounded;
    ``ahead`` is how far in the future a wake time may be and still count as
    come (``drain(include_scheduled=True)`` runs future work now).
    """

    store: StepStore
    result_max_bytes: int
    ahead: timedelta = timedelta(0)

    def log(self, claim: Claim) -> StepLog:
        return StepLog(self.store, claim, result_max_bytes=self.result_max_bytes, ahead=self.ahead)


class StepLog:
    """One run's durable calls: the recorded state read once, each new step recorded."""

    def __init__(
        self,
        store: StepStore,
        claim: Claim,
        *,
        result_max_bytes: int,
        ahead: timedelta = timedelta(0),
    ) -> None:
        self._store = store
        self._claim = claim
        self._max_bytes = result_max_bytes
        self._ahead = ahead
        self._recorded: dict[tuple[StepKind, str], RecordedStep] = {}
        self._events: dict[str, SentEvent] | None = None
        # A first run has no step recorded before it: nothing to read until a wait.
        self._steps_known = claim.run_count <= 1
        self._now = datetime.now(UTC)
        self._read_at = time.monotonic()
        self._used: set[tuple[StepKind, str]] = set()
        self._sleeps = 0

    @property
    def job_id(self) -> str:
        return self._claim.job_id

    # -- steps -------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``ctx.step``: the recorded value, or ``fn``'s result recorded."""
        recorded = self._begin_step(name)
        if recorded is not None:
            return decode_json(recorded)
        token = current_step.set(name)
        try:
            result = fn(*args, **kwargs)
        finally:
            current_step.reset(token)
        return self._record_result(name, result)

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``ctx.astep``: ``step`` for coroutine functions (and plain ones), awaited."""
        if self._steps_known:
            recorded = self._begin_step(name)
        else:
            recorded = await asyncio.to_thread(self._begin_step, name)
        if recorded is not None:
            return decode_json(recorded)
        token = current_step.set(name)
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await _awaited(result)
        finally:
            current_step.reset(token)
        return await asyncio.to_thread(self._record_result, name, result)

    def _begin_step(self, name: str) -> str | None:
        """The recorded value of step ``name`` (encoded), or None: run it."""
        key = (StepKind.STEP, validate_step_name(name))
        self._use(key, f"step {name!r}")
        self._know_steps()
        recorded = self._recorded.get(key)
        return None if recorded is None else recorded.result or "null"

    def _record_result(self, name: str, result: Any) -> Any:
        encoded = encode_json(
            result, what=f"the result of step {name!r}", max_bytes=self._max_bytes
        )
        self._record(NewDurableStep(StepKind.STEP, name, encoded), name)
        return decode_json(encoded)

    # -- sleeps ------------------------------------------------------------------

    def sleep(self, duration: timedelta | float) -> datetime | None:
        """``ctx.sleep``: None when this sleep is over, else the time to pause until."""
        duration = _duration(duration, "a sleep")
        self._sleeps += 1
        key = (StepKind.SLEEP, str(self._sleeps))
        self._use(key, f"sleep {self._sleeps}")
        self._know_steps()
        recorded = self._recorded.get(key)
        if recorded is None:
            recorded = self._record(
                NewDurableStep(StepKind.SLEEP, key[1], wake_after=duration), f"sleep {key[1]}"
            )
            if duration == timedelta(0):
                return None
        wake = recorded.wake_at
        assert wake is not None  # a sleep's row always has its wake time
        return None if wake <= self._clock() else wake

    # -- events ------------------------------------------------------------------

    def wait_for(self, name: str, timeout: timedelta | float | None) -> tuple[bool, Any, datetime]:
        """``ctx.wait_for``: ``(True, payload, _)`` when the event was sent, else
        ``(False, None, until)``; raises ``EventTimeout`` once its deadline passed."""
        name = validate_event_name(name)
        if timeout is not None:
            timeout = _duration(timeout, "a wait's timeout")
        self._use((StepKind.WAIT, name), f"wait_for {name!r}")
        events = self._know_events()
        if (StepKind.TIMEOUT, name) in self._recorded:
            raise EventTimeout(self.job_id, name)
        if name in events:
            return True, decode_json(events[name].payload), NEVER
        wait = self._recorded.get((StepKind.WAIT, name))
        if wait is None:
            wait = self._record(
                NewDurableStep(StepKind.WAIT, name, wake_after=timeout), f"wait_for {name!r}"
            )
        deadline = wait.wake_at or NEVER
        if deadline > self._clock():
            return False, None, deadline
        # The deadline passed: one more look (the event may have come since the read).
        events = self._read()
        if name in events:
            return True, decode_json(events[name].payload), NEVER
        self._record(NewDurableStep(StepKind.TIMEOUT, name), f"wait_for {name!r}")
        raise EventTimeout(self.job_id, name)

    # -- state -------------------------------------------------------------------

    def _use(self, key: tuple[StepKind, str], what: str) -> None:
        if key in self._used:
            raise ValueError(
                f"{what} was given twice in one run of job {self.job_id}; durable calls "
                "need names unique in the job (in a loop: f'page-{i}')"
            )
        self._used.add(key)

    def _know_steps(self) -> None:
        if not self._steps_known:
            self._read()

    def _know_events(self) -> dict[str, SentEvent]:
        return self._read() if self._events is None else self._events

    def _read(self) -> dict[str, SentEvent]:
        state = self._store.load_steps(self.job_id)
        for step in state.steps:
            self._recorded.setdefault((step.kind, step.name), step)
        self._events = {e.name: e for e in state.events}
        self._steps_known = True
        self._now = state.now
        self._read_at = time.monotonic()
        return self._events

    def _clock(self) -> datetime:
        """The database's now, as last read plus the time since, and ``ahead``."""
        return self._now + timedelta(seconds=time.monotonic() - self._read_at) + self._ahead

    def _record(self, step: NewDurableStep, what: str) -> RecordedStep:
        recorded = self._store.record_step(self._claim, step)
        if recorded is None:
            raise ClaimLost(self.job_id, self._claim.run_count, what)
        self._recorded[(step.kind, step.name)] = recorded
        if recorded.kind is StepKind.SLEEP or recorded.kind is StepKind.WAIT:
            # The wake time is from the database's clock: read it as the clock too.
            self._now = recorded.recorded_at
            self._read_at = time.monotonic()
        return recorded


def _duration(value: object, what: str) -> timedelta:
    """Seconds or a timedelta, not negative and at most ``MAX_DURATION``; else
    ``InvalidDelay`` (a wake time must stay a time Python can read back)."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise InvalidDelay(None, f"{what} takes seconds or a timedelta, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) > MAX_DURATION.total_seconds():
            raise InvalidDelay(value, f"{what} must be finite, at most {MAX_DURATION.days} days")
        value = timedelta(seconds=value)
    if value < timedelta(0):
        raise InvalidDelay(value, f"{what} must not be negative")
    if value > MAX_DURATION:
        raise InvalidDelay(value, f"{what} must be at most {MAX_DURATION.days} days")
    return value


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
