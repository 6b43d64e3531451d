"""Retries for Django tasks: off unless asked for.

Django has no retry API, and its backends fail a task at its first exception;
so does this one by default (``max_attempts=1``). Turn retries on for every
task of a backend with ``OPTIONS``::

    TASKS = {"default": {"BACKEND": "venturi.contrib.django.VenturiBackend",
                         "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": 10}}}

or for one task, beneath Django's decorator::

    @task
    @venturi_django.retry(max_attempts=5, backoff=lambda failures: 2**failures)
    def sync_account(account_id): ...

``BACKOFF`` / ``backoff``: seconds (a number), a function of the failure
count returning seconds or a timedelta, or None for venturi's exponential
backoff with jitter. Meanwhile the task is READY again, and each failed
attempt adds one entry to ``errors``. ``max_attempts`` counts attempts that
raised; a run lost with its worker (the worker died, its lease expired) is
retried whatever it says, up to venturi's backstop of ``BACKSTOP`` failures,
and shows in ``errors`` as ``WorkerLost``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured

from venturi.contrib.django.results import WorkerLost

__all__ = ["BACKSTOP", "LOST", "Backoff", "RetryPolicy", "policy_of", "retry"]

F = TypeVar("F", bound=Callable[..., Any])

#: venturi's ``max_failures`` of the Django kinds: failures of any cause, lost workers included.
BACKSTOP = 100
LOST = f"{WorkerLost.__module__}.{WorkerLost.__qualname__}"
_ATTRIBUTE = "__venturi_retry__"

Backoff = float | Callable[[int], "timedelta | float"] | None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 1
    backoff: Backoff = None

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise ImproperlyConfigured(f"max_attempts must be an integer, got {attempts!r}")
        if not 1 <= attempts <= BACKSTOP:
            raise ImproperlyConfigured(f"max_attempts must be 1..{BACKSTOP}, got {attempts}")
        backoff = self.backoff
        is_seconds = isinstance(backoff, int | float) and not isinstance(backoff, bool)
        if not (backoff is None or callable(backoff) or (is_seconds and backoff >= 0)):
            raise ImproperlyConfigured(
                f"backoff must be seconds, a function or None, got {backoff!r}"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RetryPolicy:
        return cls(options.get("MAX_ATTEMPTS", 1), options.get("BACKOFF"))

    def delay(self, failures: int) -> timedelta | None:
        """The wait before the next attempt; None: venturi's default backoff."""
        backoff = self.backoff
        if backoff is None:
            return None
        value = backoff(failures) if callable(backoff) else backoff
        return value if isinstance(value, timedelta) else timedelta(seconds=value)


def retry(*, max_attempts: int, backoff: Backoff = None) -> Callable[[F], F]:
    """This task's retry policy, instead of its backend's ``OPTIONS``."""
    policy = RetryPolicy(max_attempts, backoff)

    def decorate(fn: F) -> F:
        setattr(fn, _ATTRIBUTE, policy)
        return fn

    return decorate


def policy_of(task: Any) -> RetryPolicy:
    """The task's own policy, else its backend's."""
    own = getattr(task.func, _ATTRIBUTE, None)
    if isinstance(own, RetryPolicy):
        return own
    backend_policy = getattr(task.get_backend(), "retry_policy", None)
    return backend_policy if isinstance(backend_policy, RetryPolicy) else RetryPolicy()
