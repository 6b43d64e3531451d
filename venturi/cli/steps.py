"""A durable job's steps and events in ``venturi jobs show`` (ADR 0137)."""

from __future__ import annotations

from typing import Any

import orjson

from venturi.cli.common import format_table, format_time, one_line, utc
from venturi.durable import RecordedStep
from venturi.types import JobDetail

__all__ = ["steps_json", "steps_lines"]

#: Widest value shown in a step's or event's row; ``--json`` has all of it.
_VALUE_CHARS = 60


def steps_lines(detail: JobDetail) -> list[str]:
    """The ``steps:`` and ``events:`` tables after the timeline; nothing for a job
    that recorded none and was sent none."""
    lines: list[str] = []
    if detail.steps:
        header = ("STEP", "KIND", "RUN", "RECORDED", "VALUE")
        rows = [
            (
                s.name,
                s.kind.value,
                str(s.run_no),
                format_time(s.recorded_at, precise=True),
                _value(s),
            )
            for s in detail.steps
        ]
        lines += ["", "steps:", *format_table(header, rows, right={2})]
    if detail.events:
        event_header = ("EVENT", "SENT", "PAYLOAD")
        event_rows = [
            (e.name, format_time(e.sent_at, precise=True), _cut(e.payload)) for e in detail.events
        ]
        lines += ["", "events:", *format_table(event_header, event_rows)]
    return lines


def steps_json(detail: JobDetail) -> dict[str, Any]:
    """The ``steps`` and ``events`` members of ``jobs show --json``."""
    return {
        "steps": [
            {
                "name": s.name,
                "kind": s.kind.value,
                "run_no": s.run_no,
                "recorded_at": utc(s.recorded_at),
                "result": None if s.result is None else orjson.loads(s.result),
                "wake_at": utc(s.wake_at),
            }
            for s in detail.steps
        ],
        "events": [
            {"name": e.name, "sent_at": utc(e.sent_at), "payload": orjson.loads(e.payload)}
            for e in detail.events
        ],
    }


def _value(step: RecordedStep) -> str:
    if step.wake_at is not None:
        return f"until {format_time(step.wake_at, precise=True)}"
    if step.result is None:
        return "-"
    return _cut(step.result)


def _cut(text: str) -> str:
    text = one_line(text)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."
