"""Registries of tasks by kind, and the process's current App.

Every ``App`` has its own ``Registry`` (``app.task``); ``@venturi.task``
registers in ``venturi.task.default_registry``, shared by every App of the process, and
enqueues through the *current* App, the most recently created one that did not
opt out, as Celery's ``shared_task`` does with ``current_app``.

This module sits below ``venturi.task`` and ``venturi.app`` (both import it)
and imports neither: a task is seen through the small ``Registrable``
protocol, an App through ``AppLike``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

from venturi.backend import Enqueue
from venturi.errors import DuplicateKind, NoCurrentApp

__all__ = [
    "AppLike",
    "Registrable",
    "Registry",
    "current_app",
    "set_current_app",
]

logger = logging.getLogger(__name__)


class AppLike(Protocol):
    """What the task layer needs from an App: the backend it enqueues through."""

    @property
    def backend(self) -> Enqueue: ...


class Registrable(Protocol):
    """What a registry needs of a task (``venturi.task.Task`` is one): its kind, and
    its handler (the same handler again is a reload, another one a clash of kinds)."""

    @property
    def kind(self) -> str: ...

    @property
    def fn(self) -> Callable[..., object]: ...


T = TypeVar("T", bound=Registrable)


class Registry(Generic[T]):
    """Tasks by kind. Registration is thread-safe; reads see an immutable view.

    Re-registering the *same* function (same module and qualified name, e.g.
    after a module is re-imported or reloaded) replaces the task silently; a
    different function under an existing kind raises ``DuplicateKind``.

    Generic in what it holds (``Registry[Task[Any, Any]]``), so this module,
    below ``venturi.task``, need not name ``Task``.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, T] = {}
        self._view: Mapping[str, T] = MappingProxyType(self._tasks)
        self._lock = threading.Lock()

    @property
    def tasks(self) -> Mapping[str, T]:
        """A read-only, live view of kind -> task."""
        return self._view

    def register(self, task: T) -> None:
        with self._lock:
            existing = self._tasks.get(task.kind)
            if existing is not None and _identity(existing.fn) != _identity(task.fn):
                raise DuplicateKind(task.kind)
            self._tasks[task.kind] = task
        logger.debug("registered task %s", task.kind, extra={"kind": task.kind})


def _identity(fn: object) -> tuple[str, str]:
    return getattr(fn, "__module__", "") or "", getattr(fn, "__qualname__", repr(fn))


_current_app: AppLike | None = None


def set_current_app(app: AppLike) -> None:
    """Make ``app`` the one default-registry tasks enqueue through."""
    global _current_app  # noqa: PLW0603 - the process-wide current App, as Celery's
    _current_app = app


def current_app(kind: str) -> AppLike:
    """The current App; ``NoCurrentApp`` (naming ``kind``) before any App was created."""
    app = _current_app
    if app is None:
        raise NoCurrentApp(kind)
    return app
