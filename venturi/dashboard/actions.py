"""The dashboard's changes and the forms that lead to them: retry, cancel, bulk, enqueue, sign-in.

Every POST passes ``Dashboard.change`` (origin, size, CSRF) and, unless it
signs in or out, ``Dashboard.guarded`` (the permission) before it writes
anything; a change clears the shared read cache and redirects (303)
to the page that shows its effect, with a notice code in the query. The
sign-in sends the browser back to the page it was sent from (``next``, a
path under the mount only), else to the overview.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from venturi.dashboard.board import Dashboard, board_of, local_target, logger, see_other
from venturi.dashboard.security import Session, is_token
from venturi.errors import EnqueueError, InvalidArgument, InvalidState, JobNotFound
from venturi.types import Priority, Status

__all__ = [
    "bulk",
    "bulk_confirm",
    "cancel",
    "enqueue",
    "enqueue_form",
    "login",
    "login_form",
    "logout",
    "retry",
]


# ------------------------------------------------------------------ one job


async def retry(request: Request) -> Response:
    return await _job_action(request, "retry")


async def cancel(request: Request) -> Response:
    return await _job_action(request, "cancel")


async def _job_action(request: Request, action: str) -> Response:
    board = board_of(request)
    checked = await board.guarded(request)
    if isinstance(checked, Response):
        return checked
    job_id = request.path_params["job_id"]
    operation = board.app.retry if action == "retry" else board.app.cancel
    try:
        row = await run_in_threadpool(operation, job_id)
    except JobNotFound:
        return board.error(request, 404, "Not found", f"No job with id {job_id!r}.")
    except InvalidState as exc:
        return board.error(request, 409, f"Cannot {action}", str(exc))
    finally:
        board.cache.clear()
    if action == "retry":
        notice = "retried"
    else:
        notice = "cancel-requested" if row.status == Status.CLAIMED else "cancelled"
    return see_other(request, "job", f"notice={notice}", job_id=job_id)


# --------------------------------------------------------------------- bulk


async def bulk_confirm(request: Request) -> Response:
    board = board_of(request)
    session = board.session(request)
    if not board.may_change(request, session):
        return board.error(request, 403, "Sign in", "Changes need the dashboard token.")
    params = request.query_params
    action = params.get("action")
    if action not in ("retry", "cancel"):
        return board.error(request, 400, "Bad action", "Bulk actions are retry and cancel.")
    kind, note = params.get("kind") or None, params.get("note") or None
    status = Status.DEAD if action == "retry" else Status.PENDING
    try:
        count = await run_in_threadpool(
            lambda: board.app.count_jobs(status=status, kind=kind, note=note)
        )
    except InvalidArgument as exc:
        return board.error(request, 400, "Bad filter", str(exc))
    return board.render(
        request,
        "confirm.html",
        {
            "page": "jobs",
            "action": action,
            "status": status,
            "kind": kind,
            "note": note,
            "count": count,
        },
        session=session,
    )


async def bulk(request: Request) -> Response:
    board = board_of(request)
    checked = await board.guarded(request)
    if isinstance(checked, Response):
        return checked
    form, _ = checked
    action = form.get("action")
    if action not in ("retry", "cancel"):
        return board.error(request, 400, "Bad action", "Bulk actions are retry and cancel.")
    kind, note = form.get("kind") or None, form.get("note") or None
    operation = board.app.retry_matching if action == "retry" else board.app.cancel_matching
    try:
        changed = await run_in_threadpool(lambda: operation(kind=kind, note=note))
    except InvalidArgument as exc:
        return board.error(request, 400, "Bad filter", str(exc))
    finally:
        board.cache.clear()
    status = Status.PENDING if action == "retry" else Status.DEAD
    notice = "bulk-retried" if action == "retry" else "bulk-cancelled"
    shown = {"status": status.value, **({"kind": kind} if kind else {})}
    return see_other(request, "jobs", urlencode({**shown, "notice": notice, "n": changed}))


# ------------------------------------------------------------------ enqueue


async def enqueue_form(request: Request) -> Response:
    board = board_of(request)
    return _enqueue_page(request, board, {"kind": request.query_params.get("kind", "")})


def _enqueue_page(
    request: Request,
    board: Dashboard,
    form: Mapping[str, str],
    *,
    problem: str | None = None,
    status_code: int = 200,
    session: Session | None = None,
) -> HTMLResponse:
    return board.render(
        request,
        "enqueue.html",
        {
            "page": "enqueue",
            "tasks": sorted(board.app.tasks()),
            "form": form,
            "problem": problem,
            "priorities": list(Priority),
        },
        status_code=status_code,
        session=session,
    )


async def enqueue(request: Request) -> Response:
    board = board_of(request)
    checked = await board.guarded(request)
    if isinstance(checked, Response):
        return checked
    form, session = checked
    task = board.app.tasks().get(form.get("kind", ""))
    try:
        if task is None:
            raise _Refused(f"no task of kind {form.get('kind', '')!r} in this App")
        args = _json_field(form, "args", list, "[]", "a JSON array")
        kwargs = _json_field(form, "kwargs", dict, "{}", "a JSON object")
        countdown = _countdown(form.get("countdown", ""))
        raw_priority = form.get("priority", "")
        priority = int(raw_priority) if raw_priority.lstrip("-").isdigit() else None
        if raw_priority and priority is None:
            raise _Refused(f"priority {raw_priority!r} is not a tier number")
        ref = await run_in_threadpool(
            lambda: task.apply_async(args, kwargs, countdown=countdown, priority=priority)
        )
    except (_Refused, EnqueueError) as exc:
        return _enqueue_page(
            request, board, form, problem=str(exc), status_code=400, session=session
        )
    finally:
        board.cache.clear()
    return see_other(request, "job", "notice=enqueued", job_id=ref.id)


class _Refused(Exception):
    """A form value the dashboard itself refuses before asking the task."""


def _json_field(form: Mapping[str, str], name: str, kind: type, empty: str, what: str) -> Any:
    text = form.get(name, "").strip() or empty
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _Refused(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise _Refused(f"{name} must be {what}")
    return value


def _countdown(text: str) -> float | None:
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        raise _Refused(f"countdown {text!r} is not a number of seconds") from None


# ------------------------------------------------------------------ sign-in


async def login_form(request: Request) -> Response:
    board = board_of(request)
    if board.token is None:
        return board.error(request, 404, "Not found", "This dashboard has no token sign-in.")
    target = local_target(request, request.query_params.get("next"))
    return board.render(
        request, "login.html", {"page": "login", "problem": None, "next": target or ""}
    )


async def login(request: Request) -> Response:
    board = board_of(request)
    if board.token is None:
        return board.error(request, 404, "Not found", "This dashboard has no token sign-in.")
    checked = await board.change(request)
    if isinstance(checked, Response):
        return checked
    form, session = checked
    target = local_target(request, form.get("next"))
    if not is_token(form.get("token"), board.token):
        logger.warning("dashboard sign-in refused: wrong token")
        return board.render(
            request,
            "login.html",
            {
                "page": "login",
                "problem": "That is not the dashboard's token.",
                "next": target or "",
            },
            status_code=403,
            session=session,
        )
    if target is None:
        response: Response = see_other(request, "overview", "notice=signed-in")
    else:
        response = RedirectResponse(_with_notice(target, "signed-in"), status_code=303)
    board.set_cookie(request, response, board.signer.new_session(is_signed_in=True))
    return response


def _with_notice(target: str, notice: str) -> str:
    """``target`` (a path, maybe with a query) showing ``notice`` instead of any it had."""
    path, _, query = target.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "notice"]
    return f"{path}?{urlencode([*kept, ('notice', notice)])}"


async def logout(request: Request) -> Response:
    board = board_of(request)
    checked = await board.change(request)
    if isinstance(checked, Response):
        return checked
    response = see_other(request, "overview", "notice=signed-out")
    board.set_cookie(request, response, board.signer.new_session(is_signed_in=False))
    return response
