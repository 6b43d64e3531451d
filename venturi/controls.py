"""Values of control at run time (ADR 0139): a kind's stored state, the limits in force,
stored schedules and the audit trail.

Pure values, shared by the storage boundary, the App and its front ends (CLI,
dashboard); no I/O. ``UNSET`` is what an argument that was not given defaults to,
so ``set_limits(kind, rate_limit=None)`` (clear the override) differs from not
naming ``rate_limit`` at all (leave it as it is).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from venturi.types import Status

__all__ = [
    "BACKFILL_MAX_TICKS",
    "LIMIT_NAMES",
    "UNSET",
    "AuditEntry",
    "KindControl",
    "KindInfo",
    "KindState",
    "Limits",
    "ScheduleInfo",
    "StoredSchedule",
    "SubjectType",
    "Unset",
]


class Unset(enum.Enum):
    """The type of ``UNSET``: an argument left out, as opposed to one given as None."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


#: An argument that was not given (``App.set_limits``).
UNSET: Final = Unset.UNSET

#: The limits an operator may override, in the order they are shown.
LIMIT_NAMES: Final = ("global_concurrency", "rate_limit", "key_concurrency")

#: The most ticks one backfill enqueues; a longer window is refused (split it).
BACKFILL_MAX_TICKS: Final = 1000

#: What an audit entry is about.
SubjectType = Literal["kind", "schedule"]


class KindState(enum.StrEnum):
    """Whether workers claim a kind's pending jobs."""

    ACTIVE = "active"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits across workers; None: no bound (or, as overrides, none set).

    ``rate_limit`` is written as the decorator takes it (``"100/s"``);
    ``key_concurrency`` is the per-key cap of ``@task(concurrency_key=...)``.
    """

    global_concurrency: int | None = None
    rate_limit: str | None = None
    key_concurrency: int | None = None

    def over(self, declared: Limits) -> Limits:
        """These values where set, ``declared``'s elsewhere (an override over the code)."""
        return Limits(
            declared.global_concurrency
            if self.global_concurrency is None
            else self.global_concurrency,
            declared.rate_limit if self.rate_limit is None else self.rate_limit,
            declared.key_concurrency if self.key_concurrency is None else self.key_concurrency,
        )

    def as_dict(self) -> dict[str, int | str | None]:
        return {name: getattr(self, name) for name in LIMIT_NAMES}


@dataclass(frozen=True, slots=True)
class KindControl:
    """What an operator set for one kind: paused or not, and the limit overrides."""

    kind: str
    paused: bool = False
    overrides: Limits = field(default_factory=Limits)
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class KindInfo:
    """One kind of the prefix, as ``App.kinds()`` lists it.

    ``registered``: a task of this App declares it (else it is known from its
    rows or its stored state only). ``counts``: its jobs per status (every
    status present, zero included). ``declared``: the decorator's limits;
    ``overrides``: the operator's; ``limits``: those in force.
    """

    kind: str
    state: KindState
    registered: bool
    counts: Mapping[Status, int]
    declared: Limits
    overrides: Limits
    updated_at: datetime | None = None

    @property
    def limits(self) -> Limits:
        return self.overrides.over(self.declared)


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule stored in the database (``App.add_schedule``); ``kind`` is its task's."""

    name: str
    cron: str
    timezone: str
    kind: str
    kwargs: Mapping[str, Any]
    paused: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """One schedule as ``App.list_schedules()`` shows it: declared in code (``source``
    ``"code"``, never paused) or stored (``"database"``). ``next_tick``: None while
    paused, or when this App does not register the stored schedule's task."""

    name: str
    source: Literal["code", "database"]
    cron: str
    timezone: str
    kind: str
    kwargs: Mapping[str, Any]
    state: KindState
    next_tick: datetime | None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change an operator made: ``actor`` did ``action`` to ``subject`` at ``at``."""

    id: int
    at: datetime
    actor: str
    subject_type: SubjectType
    subject: str
    action: str
    details: Mapping[str, Any]
