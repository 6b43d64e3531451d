"""The run context a handler receives as its ``ctx`` parameter (ADR 15)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NoReturn

from venturi.errors import InvalidDelay
from venturi.serialization import MAX_ENCODED_BYTES
from venturi.step_log import MemorySteps, StepLog, current_step
from venturi.types import Claim

__all__ = [
    "Cancelled",
    "Context",
    "Pause",
]


class Pause(Exception):
    """Raised by ``Context.pause``; the executor turns it into a ``paused`` outcome.

    It derives from ``Exception`` like Celery's ``Retry``: a handler that wraps
    its body in ``except Exception`` must re-raise it.
    """

    def __init__(self, delay: timedelta, until: datetime | None) -> None:
        super().__init__("paused")
        self.delay = delay
        self.until = until


class Cancelled(Exception):
    """Raised by ``Context.raise_if_cancelled``; the executor records the run ``dead``,
    note ``cancelled`` (ADR 0121). An ``Exception`` for the same reason as ``Pause``."""

    def __init__(self) -> None:
        super().__init__("cancelled")


class Context:
    """What a handler knows about its run, and how it speaks back.

    ``carry`` is read/write: ``None`` on the first run, then whatever the last
    run that ended completed, paused or retried left in it (a task declared
    with ``carry=SomeDataclass`` gets that dataclass back). Direct calls of a
    decorated function get a context with ``job_id=None`` and ``run_count=0``.
    """

    __slots__ = (
        "_attachment",
        "_cancelled",
        "_has_attachment",
        "_log",
        "_steps",
        "carry",
        "failure_count",
        "job_id",
        "kind",
        "run_count",
    )

    def __init__(
        self,
        *,
        job_id: str | None,
        kind: str,
        run_count: int,
        failure_count: int,
        carry: Any = None,
        cancelled: Callable[[], bool] | None = None,
        steps: Callable[[], StepLog] | None = None,
    ) -> None:
        self.job_id = job_id
        self.kind = kind
        self.run_count = run_count
        self.failure_count = failure_count
        self.carry = carry
        self._attachment: Any = None
        self._has_attachment = False
        self._cancelled = cancelled
        self._steps = steps
        self._log: StepLog | None = None

    def is_cancelled(self) -> bool:
        """True once an operator asked to cancel this running job (``app.cancel``).

        The worker learns of the request at its next lease renewal (every third
        of the task's lease), so it becomes True within that time; a handler
        that does not stop within one more renewal interval is ended by the
        worker (ADR 0121). Always False outside a worker.
        """
        return self._cancelled is not None and self._cancelled()

    def raise_if_cancelled(self) -> None:
        """End the run as ``dead``, note ``cancelled``, if cancellation was requested."""
        if self.is_cancelled():
            raise Cancelled

    def pause(
        self, delay: timedelta | float | None = None, *, until: datetime | None = None
    ) -> NoReturn:
        """End this run as ``paused``: carry saved, no failure counted.

        The row is pending again after ``delay`` (seconds or a timedelta), or at
        ``until`` (timezone-aware); with neither, it is eligible at once.
        """
        if delay is not None and until is not None:
            raise InvalidDelay(delay, "give either delay or until, not both")
        if isinstance(delay, int | float):
            delay = timedelta(seconds=delay)
        if delay is not None and delay < timedelta(0):
            raise InvalidDelay(delay, "must not be negative")
        if until is not None and until.tzinfo is None:
            raise InvalidDelay(until, "must be timezone-aware")
        raise Pause(delay or timedelta(0), until)

    def set_attachment(self, value: Any) -> None:
        """Store JSON evidence on this run's journal entry (the last call wins)."""
        self._attachment = value
        self._has_attachment = True

    @property
    def has_attachment(self) -> bool:
        return self._has_attachment

    @property
    def attachment(self) -> Any:
        return self._attachment

    # -- durable steps, sleeps and events (ADR 0137, venturi/step_log.py) -------------

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` once per job, ever: its result is recorded
        (strict JSON, at most the App's ``result_max_bytes``) before this returns,
        and a later run of the job gets the recorded value without calling ``fn``.

        ``fn`` that raises records nothing. A ``name`` given twice in one run raises
        ``ValueError``; a result that is not strict JSON, or too large,
        ``InvalidPayload``, nothing recorded. The value returned is the recorded
        one (a JSON round trip: a tuple comes back a list), in every run alike.
        """
        return self._step_log().step(name, fn, *args, **kwargs)

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``step`` awaited: ``fn`` may be a coroutine function (or return an awaitable)."""
        return await self._step_log().astep(name, fn, *args, **kwargs)

    @property
    def step_key(self) -> str:
        """An idempotency key for the step whose function runs now: ``"<job id>:<step
        name>"``, the same in every run of the job. Give it to the service the step
        calls (a payment API's idempotency key), so that a step interrupted before it
        was recorded, and so run again, does its work once. ``RuntimeError`` outside
        a step's function."""
        name = current_step.get()
        if name is None:
            raise RuntimeError("ctx.step_key is set only while a ctx.step function runs")
        return f"{self.job_id}:{name}"

    def sleep(self, duration: timedelta | float) -> None:
        """Sleep durably: the run ends ``paused`` until ``duration`` (seconds or a
        timedelta) from the first time this call was reached, recorded with the job;
        the run that follows replays its recorded steps and passes here at once. No
        thread is held meanwhile. Sleeps are told apart by their order in the run."""
        until = self._step_log().sleep(duration)
        if until is not None:
            raise Pause(timedelta(0), until)

    async def asleep(self, duration: timedelta | float) -> None:
        """``sleep`` for async handlers."""
        log = self._step_log()
        until = await asyncio.to_thread(log.sleep, duration)
        if until is not None:
            raise Pause(timedelta(0), until)

    def wait_for(self, name: str, timeout: timedelta | float | None = None) -> Any:
        """The payload of the event ``name`` sent to this job (``app.send``).

        When none was sent yet, the run ends ``paused``; the job is woken when the
        event is sent, or at ``timeout`` after this call was first reached, where
        ``wait_for`` raises ``venturi.EventTimeout`` (in that run and every later one).
        """
        is_sent, payload, until = self._step_log().wait_for(name, timeout)
        if not is_sent:
            raise Pause(timedelta(0), until)
        return payload

    async def await_for(self, name: str, timeout: timedelta | float | None = None) -> Any:
        """``wait_for`` for async handlers."""
        log = self._step_log()
        is_sent, payload, until = await asyncio.to_thread(log.wait_for, name, timeout)
        if not is_sent:
            raise Pause(timedelta(0), until)
        return payload

    def _step_log(self) -> StepLog:
        log = self._log
        if log is None:
            if self._steps is not None:
                log = self._steps()
            else:
                # A direct call or perform: no job row, the log lives in memory.
                claim = Claim(self.job_id or "", "", self.run_count)
                log = StepLog(MemorySteps(), claim, result_max_bytes=MAX_ENCODED_BYTES)
            self._log = log
        return log
