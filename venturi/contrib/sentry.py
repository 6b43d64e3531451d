"""Failed runs as Sentry events (SPEC 6.4, ADR 0140); needs ``venturi[sentry]``.

``instrument(app)`` subscribes to ``app.events``: each run that ends in a
failure (``RunEnded.is_failure``: retried after an error, or dead from one)
is sent as one Sentry event through whichever client ``sentry_sdk.init``
installed, with tags ``venturi.job_id``, ``venturi.kind``, ``venturi.run``
and ``venturi.outcome`` (``retried`` or ``dead``), the run's note as its
message and the handler's traceback as the exception with its frames (read
from the traceback text the run stored, ADR 0121; venturi's own frames are
marked not in-app). Completed, paused and cancelled runs send nothing.

The ``venturi.runs`` logger is ignored by Sentry's logging integration, so a
dead job's ERROR line does not reach Sentry a second time as a log event.
Only this module imports ``sentry_sdk``; ``import venturi`` never does.
"""

from __future__ import annotations

import os
import re
from typing import Any

import sentry_sdk
from sentry_sdk.integrations.logging import ignore_logger

import venturi
from venturi import App
from venturi.events import Event, RunEnded, Subscription

__all__ = ["Instrumentation", "instrument", "sentry_event", "traceback_exceptions"]

#: The logger of venturi's run-end lines (``venturi.runtime.executor``).
RUNS_LOGGER = "venturi.runs"

_FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line (?P<line>\d+), in (?P<function>.*)$')
_CHAIN_LINES = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
#: venturi's own files (its frames are not the user's code), wherever it is installed.
_VENTURI_DIR = os.path.dirname(os.path.abspath(venturi.__file__)) + os.sep


class Instrumentation:
    """What ``instrument`` installed; ``uninstrument()`` takes it away again."""

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def uninstrument(self) -> None:
        self._subscription.unsubscribe()


def instrument(app: App) -> Instrumentation:
    """Send each of ``app``'s failed runs to Sentry (call ``sentry_sdk.init`` as usual).

    Instrument the worker's App; an App that only enqueues has no runs to report.
    """
    ignore_logger(RUNS_LOGGER)
    return Instrumentation(app.events.subscribe(_capture, types=(RunEnded,)))


def _capture(event: Event) -> None:
    if isinstance(event, RunEnded) and event.is_failure:
        # sentry_sdk types its events with a TypedDict of a private module (sentry_sdk._types).
        sentry_sdk.capture_event(sentry_event(event))  # type: ignore[arg-type]


def sentry_event(run: RunEnded) -> dict[str, Any]:
    """The Sentry event for a failed run: tags, message, and the exception's frames."""
    message = run.note or run.outcome.value
    event: dict[str, Any] = {
        "level": "error",
        "logger": RUNS_LOGGER,
        "transaction": run.kind,
        "message": message,
        "tags": {
            "venturi.job_id": run.job_id,
            "venturi.kind": run.kind,
            "venturi.run": str(run.run),
            "venturi.outcome": run.outcome.value,
        },
        "contexts": {
            "venturi": {
                "job_id": run.job_id,
                "kind": run.kind,
                "run": run.run,
                "outcome": run.outcome.value,
                "worker_id": run.worker_id,
                "duration_s": round(run.duration, 6),
            }
        },
        "fingerprint": ["venturi", run.kind, "{{ default }}"],
    }
    exceptions = traceback_exceptions(run.traceback) if run.traceback else []
    if exceptions:
        event["exception"] = {"values": exceptions}
    return event


def traceback_exceptions(text: str) -> list[dict[str, Any]]:
    """Sentry exception values from Python's traceback text, the outermost cause first
    and the raised exception last (Sentry's order); frames innermost last."""
    values: list[dict[str, Any]] = []
    segment: list[str] = []
    for line in [*text.splitlines(), _CHAIN_LINES[0]]:
        if line.strip() in _CHAIN_LINES:
            value = _exception(segment)
            if value is not None:
                values.append(value)
            segment = []
        else:
            segment.append(line)
    return values


def _exception(lines: list[str]) -> dict[str, Any] | None:
    frames: list[dict[str, Any]] = []
    raised: list[str] = []
    for line in lines:
        match = _FRAME.match(line)
        if match:
            raised = []
            path = match["path"]
            frames.append(
                {
                    "filename": path,
                    "abs_path": path,
                    "lineno": int(match["line"]),
                    "function": match["function"],
                    "in_app": _in_app(path),
                }
            )
        elif line.startswith("    ") and frames and not raised:
            code = line.strip()
            if code and set(code) - set("^~ ") and "context_line" not in frames[-1]:
                frames[-1]["context_line"] = code
        elif line.strip() and not line.startswith((" ", "Traceback (most recent call last)")):
            raised.append(line)
    if not raised:
        return None
    kind, _, value = raised[0].partition(": ")
    value = "\n".join([value, *raised[1:]]).strip()
    exception: dict[str, Any] = {"type": kind.strip(), "value": value}
    if frames:
        exception["stacktrace"] = {"frames": frames}
    return exception


def _in_app(path: str) -> bool:
    """A frame of the user's code: not venturi's, not an installed package's."""
    parts = path.replace("\\", "/").split("/")
    return not path.startswith(_VENTURI_DIR) and not {"site-packages", "dist-packages"} & set(parts)
