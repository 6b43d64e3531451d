"""Durable steps, sleeps and events as values (ADR 0137, SPEC 6.1).

A durable job's progress is kept as rows beside the job: each step completed
(``ctx.step``), sleep begun (``ctx.sleep``), wait begun or timed out
(``ctx.wait_for``) is a ``RecordedStep``, each event sent to the job
(``app.send``) a ``SentEvent``. What a run reads back before its first step is a
``DurableState``. The rules that do not need storage are here too: the bounds
of an event's name and payload and their checks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from venturi.errors import InvalidArgument
from venturi.serialization import is_storable_text

__all__ = [
    "MAX_EVENT_NAME_CHARS",
    "MAX_EVENT_PAYLOAD_BYTES",
    "MAX_STEP_NAME_CHARS",
    "NEVER",
    "DurableState",
    "NewDurableStep",
    "RecordedStep",
    "SentEvent",
    "StepKind",
    "validate_event_name",
    "validate_step_name",
]

#: Longest event name accepted by ``send`` and ``wait_for``.
MAX_EVENT_NAME_CHARS = 200
#: Longest step name accepted by ``ctx.step``.
MAX_STEP_NAME_CHARS = 200
#: Largest event payload, in bytes of its JSON text: events live beside the job
#: and are read by every run of it.
MAX_EVENT_PAYLOAD_BYTES = 65_536
#: The wake time of a wait without a timeout: no clock reaches it (an event wakes the job).
NEVER = datetime(9999, 1, 1, tzinfo=UTC)


class StepKind(enum.StrEnum):
    """What a recorded row stands for."""

    STEP = "step"  # ctx.step: its recorded result
    SLEEP = "sleep"  # ctx.sleep, numbered in call order: its wake time
    WAIT = "wait"  # ctx.wait_for's first run: its deadline (none without a timeout)
    TIMEOUT = "timeout"  # a wait that timed out: every later run times out too


@dataclass(frozen=True, slots=True)
class NewDurableStep:
    """A step to record: ``result`` encoded strict JSON (``None`` for none), ``wake_after``
    the delay from the database's now to its ``wake_at`` (sleeps, waits with a timeout)."""

    kind: StepKind
    name: str
    result: str | None = None
    wake_after: timedelta | None = None


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One recorded step of a job; ``run_no`` is the run that recorded it, ``result`` its
    encoded JSON (``None`` for sleeps and waits)."""

    kind: StepKind
    name: str
    run_no: int
    recorded_at: datetime
    result: str | None = None
    wake_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SentEvent:
    """One event sent to a job; ``payload`` its encoded JSON (``"null"`` for none)."""

    name: str
    payload: str
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class DurableState:
    """A job's recorded steps (in recording order) and events, and the database's now."""

    steps: tuple[RecordedStep, ...]
    events: tuple[SentEvent, ...]
    now: datetime


def validate_event_name(name: object) -> str:
    """``name`` as an event name: non-empty text PostgreSQL can hold, at most
    ``MAX_EVENT_NAME_CHARS``; ``InvalidArgument`` otherwise."""
    return _validated(name, "event name", MAX_EVENT_NAME_CHARS)


def validate_step_name(name: object) -> str:
    """``name`` as a step name, by the same rules as an event's (``MAX_STEP_NAME_CHARS``)."""
    return _validated(name, "step name", MAX_STEP_NAME_CHARS)


def _validated(name: object, what: str, limit: int) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"{what} must be text, got {type(name).__qualname__}")
    if not name:
        raise InvalidArgument(f"{what} must not be empty")
    if len(name) > limit:
        raise InvalidArgument(f"{what} is {len(name)} characters, over the limit of {limit}")
    if not is_storable_text(name):
        raise InvalidArgument(f"{what} {name!r} is not text PostgreSQL can hold (NUL?)")
    return name
