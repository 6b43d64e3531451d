"""What an enqueue returns: a reference to the job, typed by its handler's result.

``JobRef[T]`` is what ``task.delay(...)`` returns for a handler returning ``T``
(an ``async def`` handler's awaited value included), so ``ref.result()`` is a
``T`` to a type checker. A bare ``JobRef`` is ``JobRef[Any]``.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from venturi.errors import ConfigurationError
from venturi.types import Status

__all__ = ["EventTarget", "JobRef", "ResultSource"]

if TYPE_CHECKING:
    # A default makes a bare ``JobRef`` mean ``JobRef[Any]`` (PEP 696); only type
    # checkers need it, and they all ship typing_extensions.
    from typing_extensions import TypeVar as TypeVarWithDefault

    T_co = TypeVarWithDefault("T_co", covariant=True, default=Any)
else:
    T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


@runtime_checkable
class ResultSource(Protocol):
    """Where a ``JobRef`` waits for its job's result: the App that enqueued it (ADR 0124)."""

    def result(self, job_id: str, timeout: float | None = 0) -> Any: ...

    async def aresult(self, job_id: str, timeout: float | None = 0) -> Any: ...

    def status(self, job_id: str) -> Status: ...


@runtime_checkable
class EventTarget(Protocol):
    """Where a ``JobRef`` sends events to its job: the App (ADR 0137)."""

    def send(
        self, job_id: str, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None: ...

    async def asend(
        self, job_id: str, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class JobRef(Generic[T_co]):
    """What an enqueue returns: the id of the row that holds the work.

    ``merged`` is true when the job was folded into an existing pending
    sibling (keep, replace, combine); ``id`` is then the sibling's id, so a
    merged ref waits on the survivor. ``source`` is the App the task enqueued
    through, kept out of equality, hashing and repr: two refs to one job are
    equal whoever made them. A ref built by hand (``JobRef(id)``) has none;
    wait with ``app.result(id)`` instead.
    """

    id: str
    merged: bool = False
    source: ResultSource | None = field(default=None, compare=False, hash=False, repr=False)

    @overload
    def result(self: JobRef[Coroutine[Any, Any, T]], timeout: float | None = None) -> T: ...
    @overload
    def result(self: JobRef[T], timeout: float | None = None) -> T: ...
    def result(self, timeout: float | None = None) -> Any:
        """Block until the job is terminal and return its result (``timeout`` s; None:
        no limit). Raises ``JobFailed``, ``ResultTimeout``, ``JobNotFound``."""
        return self._source().result(self.id, timeout)

    @overload
    async def aresult(self: JobRef[Coroutine[Any, Any, T]], timeout: float | None = None) -> T: ...
    @overload
    async def aresult(self: JobRef[T], timeout: float | None = None) -> T: ...
    async def aresult(self, timeout: float | None = None) -> Any:
        """``result``, awaited."""
        return await self._source().aresult(self.id, timeout)

    @overload
    def get(self: JobRef[Coroutine[Any, Any, T]], timeout: float | None = None) -> T: ...
    @overload
    def get(self: JobRef[T], timeout: float | None = None) -> T: ...
    def get(self, timeout: float | None = None) -> Any:
        """``result`` under Celery's name (``AsyncResult.get``), for code moving over."""
        return self._source().result(self.id, timeout)

    def status(self) -> Status:
        return self._source().status(self.id)

    def send(self, name: str, payload: Any = None, *, connection: object | None = None) -> None:
        """Send the event ``name`` to this job (``app.send``; its ``ctx.wait_for`` gets it)."""
        self._target().send(self.id, name, payload, connection=connection)

    async def asend(
        self, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None:
        """``send``, awaited (``app.asend``)."""
        await self._target().asend(self.id, name, payload, connection=connection)

    def _target(self) -> EventTarget:
        source: object = self.source  # an App, an eager session, or None
        if not isinstance(source, EventTarget):
            raise ConfigurationError(
                f"this JobRef({self.id!r}) knows no App that sends events (it was not "
                "returned by an enqueue); use app.send(job_id, name, payload) instead"
            )
        return source

    def _source(self) -> ResultSource:
        if self.source is None:
            raise ConfigurationError(
                f"this JobRef({self.id!r}) was not returned by an enqueue, so it knows no App; "
                "use app.result(job_id) instead"
            )
        return self.source
