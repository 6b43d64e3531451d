"""The dashboard's read-only pages: overview, jobs, a job, workflows, workers, schedules.

Each page reads through the board's shared cache (``Dashboard.read``), so
viewers refreshing the same page share one query; a bad filter or page link
is a 400 page, an unknown id a 404 page.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from venturi.controls import AuditEntry, ScheduleInfo
from venturi.cursor import Cursor, decode_cursor, encode_cursor
from venturi.dashboard.board import Dashboard, board_of
from venturi.dashboard.control import AUDIT_SHOWN
from venturi.dashboard.views import (
    CHART_MINUTES,
    MAX_PARENTS_SHOWN,
    MAX_STEPS_IN_PANEL,
    MAX_STEPS_SHOWN,
    beat_row,
    bounded_steps,
    chart,
    format_json,
    kind_rows,
    result_panel,
    state_counts,
    step_rows,
    totals,
    worker_rows,
)
from venturi.errors import InvalidArgument, JobNotFound, WorkflowNotFound
from venturi.types import Status, Workflow

__all__ = [
    "PAGE_SIZE",
    "SCHEDULE_TICKS",
    "WORKFLOW_PAGE_SIZE",
    "job",
    "jobs",
    "overview",
    "schedules",
    "workers",
    "workflow",
    "workflows",
]

PAGE_SIZE = 50
#: Workflows per page: each is summed over its steps, so fewer than jobs.
WORKFLOW_PAGE_SIZE = 25
SCHEDULE_TICKS = 5


async def overview(request: Request) -> Response:
    board = board_of(request)
    app = board.app
    stats = await board.read(("stats",), app.stats)
    throughput = await board.read(
        ("throughput",), lambda: app.throughput(timedelta(minutes=CHART_MINUTES - 1))
    )
    without_worker = await board.read(("unserved_kinds",), app.unserved_kinds)
    served = set(app.tasks())
    rows = kind_rows(stats, throughput, served, without_worker)
    every = chart(throughput.minutes, throughput.current_minute, height=80)
    return board.render(
        request,
        "overview.html",
        {
            "page": "overview",
            "rows": rows,
            "totals": totals(stats),
            "chart": every,
            "oldest": stats.oldest_eligible_age,
            "statuses": list(Status),
            "unserved": [r.kind for r in rows if r.is_unserved_with_pending],
            "without_worker": without_worker,
        },
    )


async def jobs(request: Request) -> Response:
    board = board_of(request)
    params = request.query_params
    status = params.get("status") or None
    kind = params.get("kind") or None
    note = params.get("note") or None
    after: Cursor | None = None
    if params.get("after"):
        try:
            after = decode_cursor(params["after"])
        except ValueError:
            return board.error(request, 400, "Bad cursor", "That page link is not valid.")
    try:
        page = await board.read(
            ("jobs", status, kind, note, after),
            lambda: board.app.job_summaries(
                status=status, kind=kind, note=note, limit=PAGE_SIZE, after=after
            ),
        )
    except InvalidArgument as exc:
        return board.error(request, 400, "Bad filter", str(exc))
    filters = {k: v for k, v in (("status", status), ("kind", kind), ("note", note)) if v}
    stats = await board.read(("stats",), board.app.stats)
    kinds = sorted({k.kind for k in stats.kinds} | set(board.app.tasks()))
    return board.render(
        request,
        "jobs.html",
        {
            "page": "jobs",
            "jobs": page.jobs,
            "filters": filters,
            "status": status,
            "kind": kind,
            "note": note,
            "kinds": kinds,
            "statuses": list(Status),
            "is_first_page": after is None,
            "next_query": urlencode({**filters, "after": encode_cursor(page.next)})
            if page.next is not None
            else None,
            "bulk_query": urlencode({k: v for k, v in filters.items() if k != "status"}),
        },
    )


async def job(request: Request) -> Response:
    board = board_of(request)
    job_id = request.path_params["job_id"]
    try:
        detail = await board.read(("job", job_id), lambda: board.app.job(job_id))
    except JobNotFound:
        return await _step(request, board, job_id)
    # Only a completed job has a result to read: one more primary-key read, shared.
    result = await board.read(
        ("result", job_id, detail.job.status),
        lambda: result_panel(detail.job.status, lambda: board.app.result(job_id, timeout=0)),
    )
    workflow = await board.read(("workflow_of", job_id), lambda: board.app.workflow_of(job_id))
    return board.render(
        request,
        "job.html",
        {
            "page": "jobs",
            "detail": detail,
            "result": result,
            **_workflow_context(workflow, current=detail.job.id),
        },
    )


async def _step(request: Request, board: Dashboard, job_id: str) -> Response:
    """A workflow step that is not a job: waiting for its parents, or one that never
    ran because a dependency ended dead. Its workflow says which."""
    workflow = await board.read(("workflow_of", job_id), lambda: board.app.workflow_of(job_id))
    step = next((s for s in workflow.steps if s.id == job_id.upper()), None) if workflow else None
    if workflow is None or step is None:
        return board.error(request, 404, "Not found", f"No job with id {job_id!r}.")
    return board.render(
        request,
        "step.html",
        {"page": "workflows", "step": step, **_workflow_context(workflow, current=step.id)},
    )


def _workflow_context(
    workflow: Workflow | None, *, limit: int = MAX_STEPS_IN_PANEL, current: str | None = None
) -> dict[str, Any]:
    if workflow is None:
        return {"workflow": None}
    steps, omitted = bounded_steps(step_rows(workflow), limit, current)
    return {
        "workflow": workflow,
        "steps": steps,
        "omitted_steps": omitted,
        "step_counts": state_counts(workflow),
        "current_step": current,
        "max_parents": MAX_PARENTS_SHOWN,
    }


async def workflows(request: Request) -> Response:
    board = board_of(request)
    before = request.query_params.get("before") or None
    try:
        found = await board.read(
            ("workflows", before),
            lambda: board.app.workflows(limit=WORKFLOW_PAGE_SIZE, before=before),
        )
    except InvalidArgument as exc:
        return board.error(request, 400, "Bad page", str(exc))
    return board.render(
        request,
        "workflows.html",
        {
            "page": "workflows",
            "workflows": found,
            "is_first_page": before is None,
            "next_query": urlencode({"before": found[-1].id})
            if len(found) == WORKFLOW_PAGE_SIZE
            else None,
        },
    )


async def workflow(request: Request) -> Response:
    board = board_of(request)
    workflow_id = request.path_params["workflow_id"]
    try:
        found = await board.read(("workflow", workflow_id), lambda: board.app.workflow(workflow_id))
    except WorkflowNotFound:
        return board.error(request, 404, "Not found", f"No workflow with id {workflow_id!r}.")
    return board.render(
        request,
        "workflow.html",
        {"page": "workflows", **_workflow_context(found, limit=MAX_STEPS_SHOWN)},
    )


async def workers(request: Request) -> Response:
    board = board_of(request)
    found = await board.read(("workers",), board.app.workers)
    rows = worker_rows(found, datetime.now(UTC))
    return board.render(request, "workers.html", {"page": "workers", "workers": rows})


async def schedules(request: Request) -> Response:
    board = board_of(request)
    now = datetime.now(UTC)
    rows = []
    for schedule in board.app.schedules():
        ticks = []
        after = now
        for _ in range(SCHEDULE_TICKS):
            after = schedule.next_tick(after=after)
            ticks.append(after)
        arguments = format_json({"args": list(schedule.args), "kwargs": dict(schedule.kwargs)})
        rows.append((schedule, ticks, arguments))
    leader = await board.read(("active_beat",), board.app.active_beat)
    stored = await board.read(("stored_schedules",), lambda: _stored_rows(board))
    return board.render(
        request,
        "schedules.html",
        {
            "page": "schedules",
            "schedules": rows,
            "stored": stored,
            "beat": beat_row(leader, now),
        },
    )


def _stored_rows(board: Dashboard) -> list[tuple[ScheduleInfo, str, list[AuditEntry]]]:
    """The stored schedules (ADR 0139), their arguments shown and their audit trails."""
    app = board.app
    return [
        (info, format_json(dict(info.kwargs)), app.schedule_audit(info.name, limit=AUDIT_SHOWN))
        for info in app.list_schedules()
        if info.source == "database"
    ]
