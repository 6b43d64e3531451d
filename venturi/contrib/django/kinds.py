"""How Django's queues map onto venturi kinds.

Each queue of a ``VenturiBackend`` is two kinds: ``django:<queue>`` for plain
functions and ``django:<queue>:async`` for coroutine functions (run as async
handlers, ADR 0126). A worker serves a queue by serving both kinds, so
``--queues emails`` is ``--kinds django:emails,django:emails:async``. The job's
payload names the task (its module path) and the call; one kind per queue
rather than per task keeps workers from having to import every task up front
and keeps the task's own name out of the claim path.

Django's priorities (-100..100) fold onto venturi's three tiers by sign:
positive is HIGH, zero (the default) NORMAL, negative LOW. Within a tier jobs
are claimed oldest first, so priorities 1 and 100 are the same to the queue.
"""

from __future__ import annotations

from collections.abc import Iterable

from venturi import Priority

__all__ = ["ASYNC_SUFFIX", "PREFIX", "is_django_kind", "kinds_of_queues", "queue_kind", "tier"]

PREFIX = "django:"
ASYNC_SUFFIX = ":async"


def queue_kind(queue_name: str, *, is_async: bool) -> str:
    return f"{PREFIX}{queue_name}{ASYNC_SUFFIX if is_async else ''}"


def kinds_of_queues(queue_names: Iterable[str]) -> list[str]:
    """Every kind that serves these queues."""
    return [queue_kind(q, is_async=a) for q in queue_names for a in (False, True)]


def is_django_kind(kind: str) -> bool:
    return kind.startswith(PREFIX)


def tier(priority: int) -> Priority:
    """Django's priority (-100..100, higher runs sooner) as a venturi tier."""
    if priority > 0:
        return Priority.HIGH
    if priority < 0:
        return Priority.LOW
    return Priority.NORMAL
