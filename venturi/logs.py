"""Logging set-up for the ``venturi`` command line: text or one JSON object a line.

The library never configures logging (STYLE R13): ``configure`` is used by
``venturi.cli`` only. A program that embeds a Worker configures logging its
own way, and may reuse ``JsonFormatter`` for it. The one exception is
``show_in_server``, for the in-server integrations: a web server configures
its own loggers and none of venturi's, which left the worker's start and stop
lines unseen; it adds a handler only where no handler would see them.

JSON lines carry ``time`` (ISO 8601, UTC), ``level``, ``logger`` and
``message``, then the job fields a record was logged with in ``extra``
(``job_id``, ``kind``, and on run-end lines ``run``, ``outcome`` and
``duration_ms``), and ``exception`` (the formatted traceback) when there is one.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

__all__ = [
    "FORMATS",
    "JOB_FIELDS",
    "LEVELS",
    "TEXT_FORMAT",
    "JsonFormatter",
    "LogFormat",
    "configure",
    "show_in_server",
]

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: ``extra`` fields copied into a JSON line when a record has them.
JOB_FIELDS = ("job_id", "kind", "run", "outcome", "duration_ms")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, option=orjson.OPT_UTC_Z, default=str).decode()


def show_in_server(level: int = logging.INFO) -> None:
    """Send venturi's records at ``level`` or above to stderr, as ``venturi worker``
    shows them, when no handler would receive them (nothing on the ``venturi`` logger
    or above it: uvicorn, werkzeug and Django configure only their own loggers).
    A program that configured logging, at the root or for ``venturi``, keeps its own
    set-up untouched. Idempotent."""
    venturi = logging.getLogger("venturi")
    if venturi.hasHandlers():
        return
    venturi.addHandler(_stderr_handler("text"))
    if venturi.getEffectiveLevel() > level:
        venturi.setLevel(level)


def configure(level: int | str, log_format: LogFormat = "text") -> None:
    """Send every log record at ``level`` or above to stderr, as text or JSON.

    Replaces the root logger's handlers, so calling it twice does not double
    the lines.
    """
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(_stderr_handler(log_format))
    root.setLevel(level)


def _stderr_handler(log_format: LogFormat) -> logging.Handler:
    """A stderr handler writing ``venturi worker``'s text lines or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    return handler
