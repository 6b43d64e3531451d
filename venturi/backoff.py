"""Retry delays (ADR 13): pure functions of the failure count, randomness injectable.

The default is exponential with *equal jitter*, capped: the n-th failure
waits ``d / 2 + rand() * d / 2`` where ``d = min(cap, base * 2 ** (n - 1))``,
so with the defaults (base 1 s, cap 1 h) the delays are 0.5-1 s, 1-2 s,
2-4 s, ... and never more than an hour. Equal jitter rather than "full"
jitter (``rand() * d``): full jitter can retry a failing job almost at once
however many times it has failed, while equal jitter keeps the exponential
growth (each wait is at least half the nominal one) and still spreads a burst
of jobs that failed together over the other half.

A task takes ``backoff=`` as an ``Exponential(...)``, any callable
``failure_count -> timedelta``, or a fixed ``timedelta`` / number of seconds.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final

__all__ = [
    "DEFAULT_BASE",
    "DEFAULT_CAP",
    "Exponential",
    "Fixed",
    "exponential_backoff",
]

DEFAULT_BASE: Final = timedelta(seconds=1)
DEFAULT_CAP: Final = timedelta(hours=1)

# 2 ** 64 seconds is far past any cap; clamping the exponent keeps the float finite.
_MAX_EXPONENT: Final = 64


def exponential_backoff(
    failure_count: int,
    *,
    base: timedelta = DEFAULT_BASE,
    cap: timedelta = DEFAULT_CAP,
    rand: Callable[[], float] = random.random,
) -> timedelta:
    """The delay before the retry that follows the ``failure_count``-th failure (1 = first).

    ``rand`` returns a float in ``[0, 1)``; pass a constant for deterministic tests.
    Raises ``ValueError`` for ``failure_count < 1``: there is no retry before a failure.
    """
    if failure_count < 1:
        raise ValueError(f"failure_count must be at least 1, got {failure_count}")
    exponent = min(failure_count - 1, _MAX_EXPONENT)
    nominal = min(cap.total_seconds(), base.total_seconds() * 2.0**exponent)
    half = nominal / 2
    return timedelta(seconds=half + rand() * half)


@dataclass(frozen=True, slots=True)
class Exponential:
    """A configured exponential backoff, usable as ``@task(backoff=Exponential(...))``.

    Options:
        base: nominal delay after the first failure (default 1 s).
        cap: largest nominal delay (default 1 h).
        rand: source of jitter in ``[0, 1)`` (default ``random.random``).
    """

    base: timedelta = DEFAULT_BASE
    cap: timedelta = DEFAULT_CAP
    rand: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base:
            raise ValueError(f"need 0 < base <= cap, got base={self.base}, cap={self.cap}")

    def __call__(self, failure_count: int) -> timedelta:
        return exponential_backoff(failure_count, base=self.base, cap=self.cap, rand=self.rand)


@dataclass(frozen=True, slots=True)
class Fixed:
    """A constant retry delay, from ``@task(backoff=timedelta(...))`` or a number of seconds."""

    delay: timedelta

    def __call__(self, failure_count: int) -> timedelta:
        return self.delay
