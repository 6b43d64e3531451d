"""The dashboard's control at run time (ADR 0139): the kinds page, and the changes behind the
kinds and schedules pages' buttons (pause, resume, limits; pause, resume, trigger).

Every change is a POST through ``Dashboard.guarded`` (origin, CSRF, the permission to
change), as retry and cancel are; the kind or schedule travels in the form, never in
the path (a kind may hold any character). The audit trail names the dashboard and the
client's address. Bad input is a 400 page, an unknown name a 404 page; nothing is
written for either.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from venturi.controls import LIMIT_NAMES, UNSET, AuditEntry, KindInfo
from venturi.dashboard.board import board_of, see_other
from venturi.errors import (
    ConfigurationError,
    InvalidArgument,
    KindNotFound,
    ScheduleNotFound,
)
from venturi.types import Status

__all__ = ["AUDIT_SHOWN", "kind_change", "kinds", "schedule_change"]

#: Audit entries shown per kind or schedule.
AUDIT_SHOWN = 10


async def kinds(request: Request) -> Response:
    board = board_of(request)
    app = board.app
    infos: list[KindInfo] = await board.read(("kinds",), app.kinds)

    def trails() -> dict[str, list[AuditEntry]]:
        return {info.kind: app.kind_audit(info.kind, limit=AUDIT_SHOWN) for info in infos}

    audit = await board.read(("kind_audit", tuple(i.kind for i in infos)), trails)
    return board.render(
        request,
        "kinds.html",
        {
            "page": "kinds",
            "kinds": infos,
            "statuses": list(Status),
            "limit_names": LIMIT_NAMES,
            "audit": audit,
        },
    )


async def kind_change(request: Request) -> Response:
    """``action``: pause, resume or limits (blank field: unchanged; ``none``: cleared)."""
    board = board_of(request)
    checked = await board.guarded(request)
    if isinstance(checked, Response):
        return checked
    form, _ = checked
    kind, action = form.get("kind", ""), form.get("action")
    actor = _actor(request)
    app = board.app
    try:
        if action == "pause":
            await run_in_threadpool(lambda: app.pause_kind(kind, actor=actor))
        elif action == "resume":
            await run_in_threadpool(lambda: app.resume_kind(kind, actor=actor))
        elif action == "limits":
            given = {name: _limit_field(form.get(name, "")) for name in LIMIT_NAMES}
            await run_in_threadpool(lambda: app.set_limits(kind, actor=actor, **given))
        else:
            return board.error(request, 400, "Bad action", "Kinds are paused, resumed or limited.")
    except KindNotFound as exc:
        return board.error(request, 404, "Not found", str(exc))
    except (InvalidArgument, ConfigurationError) as exc:
        return board.error(request, 400, "Bad limits", str(exc))
    finally:
        board.cache.clear()
    return see_other(request, "kinds", f"notice=kind-{action}")


async def schedule_change(request: Request) -> Response:
    """``action``: pause, resume (stored schedules) or trigger (any schedule)."""
    board = board_of(request)
    checked = await board.guarded(request)
    if isinstance(checked, Response):
        return checked
    form, _ = checked
    name, action = form.get("name", ""), form.get("action")
    actor = _actor(request)
    app = board.app
    changes: dict[str, Any] = {
        "pause": app.pause_schedule,
        "resume": app.resume_schedule,
        "trigger": app.trigger_schedule,
    }
    change = changes.get(action or "")
    if change is None:
        return board.error(
            request, 400, "Bad action", "Schedules are paused, resumed or triggered."
        )
    try:
        await run_in_threadpool(lambda: change(name, actor=actor))
    except ScheduleNotFound as exc:
        return board.error(request, 404, "Not found", str(exc))
    except ConfigurationError as exc:
        return board.error(request, 400, f"Cannot {action}", str(exc))
    finally:
        board.cache.clear()
    return see_other(request, "schedules", f"notice=schedule-{action}")


def _limit_field(text: str) -> Any:
    """A limit form field: blank, not given; ``none``, cleared; else the value (the
    App validates it: a count, or a rate such as ``10/s``)."""
    text = text.strip()
    if not text:
        return UNSET
    if text.lower() == "none":
        return None
    return int(text) if text.lstrip("-").isdigit() else text


def _actor(request: Request) -> str:
    client = request.client
    return f"dashboard {client.host}" if client is not None else "dashboard"
