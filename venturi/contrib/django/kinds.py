"""How Django's tasks and queues map onto venturi kinds.

A Django task is a kind of its own: its module path (``Task.module_path``, e.g.
``myapp.tasks.send_welcome``), so stats, the dashboard and metrics tell tasks
apart. The kind is declared where the task is: Django validates every ``Task``
it builds with its backend (``VenturiBackend.validate_task``), and ``declare``
keeps the one built while its module path does not name it yet, the decorator
at its module's import. Every process that imports the module (a worker
imports each installed app's ``tasks`` module at startup, ADR 0130) therefore
declares the same kind on the same queue; ``task.using(...)`` copies, made
later, declare nothing. A task whose module a worker has not imported is a kind
that worker does not serve: its jobs wait, and ``venturi stats``, the workers'
logs and the dashboard report the kind as unserved, like any kind without a
worker.

``kind_of`` is the kind an enqueue writes: the task's own when it goes to the
backend and queue it is declared with, as its module binds it. One that goes
elsewhere (``task.using(queue_name="bulk")``, another backend) is written under
that queue's kind, ``django:<queue>`` (``django:<queue>:async`` for coroutine
functions, run as async handlers, ADR 0126): the kinds of the previous release,
still registered, so that the jobs it queued run after an upgrade too. Their
handler finds the task by the path its payload names, as before.

A worker serves a queue by serving the kinds of the tasks declared on it and
the queue's two kinds (``kinds_of_queues``): ``--queues emails`` is ``--kinds``
with those.

Django's priorities (-100..100) fold onto venturi's three tiers by sign:
positive is HIGH, zero (the default) NORMAL, negative LOW. Within a tier jobs
are claimed oldest first, so priorities 1 and 100 are the same to the queue.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from inspect import iscoroutinefunction
from typing import Any

from venturi import Priority
from venturi.contrib.django.compat import Task

__all__ = [
    "ASYNC_SUFFIX",
    "PREFIX",
    "Declared",
    "declare",
    "declared",
    "is_queue_kind",
    "kind_of",
    "kinds_of_queues",
    "queue_kind",
    "tier",
]

PREFIX = "django:"
ASYNC_SUFFIX = ":async"


@dataclass(frozen=True, slots=True)
class Declared:
    """A Django task's own kind, where the task is declared."""

    kind: str
    backend: str
    queue_name: str
    is_async: bool


_lock = threading.Lock()
_declared: dict[str, Declared] = {}


def queue_kind(queue_name: str, *, is_async: bool) -> str:
    """The queue's kind: ``django:<queue>``, or ``django:<queue>:async``."""
    return f"{PREFIX}{queue_name}{ASYNC_SUFFIX if is_async else ''}"


def is_queue_kind(kind: str) -> bool:
    return kind.startswith(PREFIX)


def declare(task: Any) -> Declared | None:
    """The task's kind, when ``task`` is a declaration (its module path does not name
    it yet); None for a copy of a task its module already binds."""
    if _same_function(_bound(task.func), task):
        return None
    declaration = Declared(
        kind=task.module_path,
        backend=task.backend,
        queue_name=task.queue_name,
        is_async=iscoroutinefunction(task.func),
    )
    with _lock:
        _declared[declaration.kind] = declaration
    return declaration


def declared(backend: str) -> list[Declared]:
    """The tasks declared on ``backend`` (an alias of ``TASKS``) so far."""
    with _lock:
        return [d for d in _declared.values() if d.backend == backend]


def kind_of(task: Any) -> str:
    """The kind an enqueue of ``task`` writes (module docstring)."""
    declaration = _declared.get(task.module_path)
    where = (task.backend, task.queue_name)
    if declaration is not None and (declaration.backend, declaration.queue_name) == where:
        bound = _bound(task.func)
        if _same_function(bound, task) and (bound.backend, bound.queue_name) == where:
            return declaration.kind
    return queue_kind(task.queue_name, is_async=iscoroutinefunction(task.func))


def kinds_of_queues(queue_names: Iterable[str]) -> list[str]:
    """Every kind that serves these queues: their tasks' own, then the queues' kinds."""
    names = list(dict.fromkeys(queue_names))
    with _lock:
        own = sorted(d.kind for d in _declared.values() if d.queue_name in names)
    return own + [queue_kind(q, is_async=a) for q in names for a in (False, True)]


def tier(priority: int) -> Priority:
    """Django's priority (-100..100, higher runs sooner) as a venturi tier."""
    if priority > 0:
        return Priority.HIGH
    if priority < 0:
        return Priority.LOW
    return Priority.NORMAL


def _bound(func: Any) -> Any:
    """What the module of ``func`` binds at its module path now (None: nothing yet)."""
    found: Any = sys.modules.get(getattr(func, "__module__", ""))
    for name in getattr(func, "__qualname__", "").split("."):
        found = getattr(found, name, None)
    return found


def _same_function(bound: Any, task: Any) -> bool:
    return isinstance(bound, Task) and bound.func is task.func
