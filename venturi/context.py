"""The run context a handler receives as its ``ctx`` parameter (ADR 15)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NoReturn

from venturi.errors import InvalidDelay

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
    ) -> None:
        self.job_id = job_id
        self.kind = kind
        self.run_count = run_count
        self.failure_count = failure_count
        self.carry = carry
        self._attachment: Any = None
        self._has_attachment = False
        self._cancelled = cancelled

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
