"""The dashboard's keys page (ADR 0138): for each keyed kind (``concurrency_key=`` or
``rate_key=``), the limits in force and its busiest keys by running, then pending jobs.

Read-only, through the board's shared cache like every page; keys are the
application's text, escaped by the templates' autoescape.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from venturi.app import App
from venturi.dashboard.board import board_of
from venturi.errors import ConfigurationError
from venturi.types import KeyOccupancy, KindLimits

__all__ = ["TOP_KEYS", "KeyedKind", "describe", "keys"]

#: Keys shown per kind.
TOP_KEYS = 20


@dataclass(frozen=True, slots=True)
class KeyedKind:
    """One keyed kind's section: its limits in words, and its busiest keys."""

    kind: str
    limits: str
    keys: list[KeyOccupancy]


def describe(limits: KindLimits) -> str:
    """The limits in force, as the decorator spells them."""
    parts = []
    if limits.key_concurrency is not None:
        parts.append(f"key_concurrency={limits.key_concurrency}")
    if limits.rate_limit is not None:
        rate = limits.rate_limit
        unit = {1: "s", 60: "m", 3600: "h"}.get(int(rate.period.total_seconds()), "s")
        where = " per key" if limits.rate_per_key else ""
        parts.append(f"rate_limit={rate.starts}/{unit}{where}")
    if limits.global_concurrency is not None:
        parts.append(f"global_concurrency={limits.global_concurrency}")
    parts.extend(f"limits={shared.name}" for shared in limits.shared)
    return ", ".join(parts)


def _busiest(app: App, kind: str) -> list[KeyOccupancy]:
    return app.key_occupancy(kind, limit=TOP_KEYS)


async def keys(request: Request) -> Response:
    board = board_of(request)
    app = board.app
    sections = []
    for kind, task in sorted(app.tasks().items()):
        options = task.options
        if options.concurrency_key is None and options.rate_key is None:
            continue
        try:
            limits = describe(app.limits_of(kind))
        except ConfigurationError as exc:
            limits = str(exc)
        found = await board.read(("keys", kind), functools.partial(_busiest, app, kind))
        sections.append(KeyedKind(kind, limits, found))
    return board.render(request, "keys.html", {"page": "keys", "kinds": sections, "top": TOP_KEYS})
