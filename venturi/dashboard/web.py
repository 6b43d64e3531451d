"""The dashboard's ASGI application: pages, actions, and the rules around changes.

Only venturi's public API is used (App operations and tasks), so the
dashboard works against any App, whatever backend it was built with.
Blocking App calls run in Starlette's thread pool; reads go through one
``SharedCache`` so viewers do not multiply queries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from venturi.app import App
from venturi.dashboard import views
from venturi.dashboard.cache import SharedCache
from venturi.dashboard.security import (
    COOKIE,
    Authorize,
    SecurityHeaders,
    Session,
    Signer,
    is_same_origin,
    is_token,
)
from venturi.errors import (
    BackendUnavailable,
    ConfigurationError,
    EnqueueError,
    InvalidArgument,
    InvalidState,
    JobNotFound,
    VenturiError,
    WorkflowNotFound,
)
from venturi.types import Cursor, Priority, Status, Workflow, decode_cursor, encode_cursor

logger = logging.getLogger(__name__)

T = TypeVar("T")

HERE = Path(__file__).parent
PAGE_SIZE = 50
#: Workflows per page: each is summed over its steps, so fewer than jobs.
WORKFLOW_PAGE_SIZE = 25
SCHEDULE_TICKS = 5
#: Form bodies are a few fields; anything larger is refused before parsing.
MAX_FORM_BYTES = 64 * 1024

#: The navigation, in order: (route name, label).
NAVIGATION = (
    ("overview", "Overview"),
    ("jobs", "Jobs"),
    ("workflows", "Workflows"),
    ("workers", "Workers"),
    ("schedules", "Schedules"),
    ("enqueue", "Enqueue"),
)

#: Messages shown after a change, by code: the URL carries a code, never text.
NOTICES = {
    "retried": "Retried: the job is pending again, eligible now.",
    "cancelled": "Cancelled: the job is dead with the note 'cancelled'.",
    "cancel-requested": (
        "Cancellation requested: the job's worker sees the request at its next lease "
        "renewal and ends the run dead, note 'cancelled' (a run that completes first "
        "stays completed)."
    ),
    "enqueued": "Enqueued.",
    "bulk-retried": "Retried {n} job(s).",
    "bulk-cancelled": "Cancelled {n} job(s).",
    "signed-in": "Signed in: changes are allowed in this browser.",
    "signed-out": "Signed out.",
}


class Dashboard:
    """The state behind the routes: the App, the rules for changes, the shared cache."""

    def __init__(
        self,
        app: App,
        *,
        token: str | None,
        read_only: bool,
        authorize: Authorize | None,
        secret: bytes | None,
        live_interval: float,
    ) -> None:
        if read_only and (token is not None or authorize is not None):
            raise ConfigurationError("a read-only dashboard takes no token and no authorize hook")
        if not read_only and token is None and authorize is None:
            raise ConfigurationError(
                "the dashboard needs token=... (or authorize=...) to allow changes, "
                "or read_only=True"
            )
        if token is not None and (not token or len(token) < 8):
            raise ConfigurationError("the dashboard token must be at least 8 characters")
        if not live_interval > 0:
            raise ConfigurationError(f"live_interval must be positive, got {live_interval}")
        self.app = app
        self.token = token
        self.is_read_only = read_only
        self.authorize = authorize
        self.signer = Signer.for_token(token, secret)
        self.cache = SharedCache(live_interval)
        self.live_interval = live_interval
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters.update(
            age=views.format_age,
            time=views.format_time,
            json=views.format_json,
            traceback=views.bounded_traceback,
        )

    # -- reads (shared) --------------------------------------------------------------

    async def read(self, key: tuple[Any, ...], load: Callable[[], T]) -> T:
        return await run_in_threadpool(self.cache.get, key, load)

    # -- sessions and permission -----------------------------------------------------

    def session(self, request: Request) -> Session:
        found = self.signer.read_session(request)
        if found is not None and found.is_signed_in and self.token is None:
            found = Session(found.nonce, False)
        return found or self.signer.new_session(is_signed_in=False)

    def may_change(self, request: Request, session: Session) -> bool:
        if self.is_read_only:
            return False
        if self.authorize is not None and self.authorize(request):
            return True
        return self.token is not None and session.is_signed_in

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        status_code: int = 200,
        session: Session | None = None,
    ) -> HTMLResponse:
        session = session or self.session(request)
        notice = NOTICES.get(request.query_params.get("notice", ""))
        if notice is not None:
            count = request.query_params.get("n", "")
            notice = notice.format(n=int(count) if count.isdigit() else "some")
        html = self.templates.get_template(template).render(
            request=request,
            url=lambda name, **params: _url(request, name, **params),
            navigation=NAVIGATION,
            is_read_only=self.is_read_only,
            has_token=self.token is not None,
            may_change=self.may_change(request, session),
            csrf=self.signer.csrf_token(session),
            live_interval=self.live_interval,
            notice=notice,
            **{"page": "", **context},
        )
        response = HTMLResponse(html, status_code=status_code)
        response.headers["cache-control"] = "no-store"
        if session.is_new:
            self.set_cookie(request, response, session)
        return response

    def set_cookie(self, request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            self.signer.cookie_value(session),
            path=_root(request) or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def error(self, request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
        return self.render(
            request, "error.html", {"title": title, "message": message}, status_code=status_code
        )

    async def change(self, request: Request) -> tuple[dict[str, str], Session] | Response:
        """Every POST passes here: read-only, origin, CSRF and permission, in that order.

        Returns the form and session, or the refusal to send; nothing is written
        before this returns a form.
        """
        if self.is_read_only:
            return self.error(request, 403, "Read-only", "This dashboard is read-only.")
        if not is_same_origin(request):
            return self.error(
                request, 403, "Refused", "The request did not come from this dashboard's pages."
            )
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return self.error(request, 413, "Too large", "The form is too large.")
        try:
            form = dict(parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False))
        except UnicodeDecodeError:
            return self.error(request, 400, "Bad form", "The form is not UTF-8 text.")
        session = self.session(request)
        if session.is_new or not self.signer.is_valid_csrf(session, form.get("csrf")):
            return self.error(
                request,
                403,
                "Refused",
                "The form's security token is missing or stale: reload the page and try again.",
            )
        return form, session

    async def guarded(self, request: Request) -> tuple[dict[str, str], Session] | Response:
        """``change`` plus the permission to change things."""
        checked = await self.change(request)
        if isinstance(checked, Response):
            return checked
        _, session = checked
        if not self.may_change(request, session):
            return self.error(request, 403, "Sign in", "Changes need the dashboard token.")
        return checked


# ---------------------------------------------------------------------------- pages


async def overview(request: Request) -> Response:
    board = _board(request)
    app = board.app
    stats = await board.read(("stats",), app.stats)
    throughput = await board.read(
        ("throughput",), lambda: app.throughput(timedelta(minutes=views.CHART_MINUTES - 1))
    )
    without_worker = await board.read(("unserved_kinds",), app.unserved_kinds)
    served = set(app.tasks())
    rows = views.kind_rows(stats, throughput, served, without_worker)
    every = views.chart(throughput.minutes, throughput.current_minute, height=80)
    return board.render(
        request,
        "overview.html",
        {
            "page": "overview",
            "rows": rows,
            "totals": views.totals(stats),
            "chart": every,
            "oldest": stats.oldest_eligible_age,
            "statuses": list(Status),
            "unserved": [r.kind for r in rows if r.is_unserved_with_pending],
            "without_worker": without_worker,
        },
    )


async def jobs(request: Request) -> Response:
    board = _board(request)
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
    board = _board(request)
    job_id = request.path_params["job_id"]
    try:
        detail = await board.read(("job", job_id), lambda: board.app.job(job_id))
    except JobNotFound:
        return await _step(request, board, job_id)
    # Only a completed job has a result to read: one more primary-key read, shared.
    result = await board.read(
        ("result", job_id, detail.job.status),
        lambda: views.result_panel(detail.job.status, lambda: board.app.result(job_id, timeout=0)),
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
    workflow: Workflow | None, *, limit: int = views.MAX_STEPS_IN_PANEL, current: str | None = None
) -> dict[str, Any]:
    if workflow is None:
        return {"workflow": None}
    steps, omitted = views.bounded_steps(views.step_rows(workflow), limit, current)
    return {
        "workflow": workflow,
        "steps": steps,
        "omitted_steps": omitted,
        "step_counts": views.state_counts(workflow),
        "current_step": current,
        "max_parents": views.MAX_PARENTS_SHOWN,
    }


async def workflows(request: Request) -> Response:
    board = _board(request)
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
    board = _board(request)
    workflow_id = request.path_params["workflow_id"]
    try:
        found = await board.read(("workflow", workflow_id), lambda: board.app.workflow(workflow_id))
    except WorkflowNotFound:
        return board.error(request, 404, "Not found", f"No workflow with id {workflow_id!r}.")
    return board.render(
        request,
        "workflow.html",
        {"page": "workflows", **_workflow_context(found, limit=views.MAX_STEPS_SHOWN)},
    )


async def workers(request: Request) -> Response:
    board = _board(request)
    found = await board.read(("workers",), board.app.workers)
    rows = views.worker_rows(found, datetime.now(UTC))
    return board.render(request, "workers.html", {"page": "workers", "workers": rows})


async def schedules(request: Request) -> Response:
    board = _board(request)
    now = datetime.now(UTC)
    rows = []
    for schedule in board.app.schedules():
        ticks = []
        after = now
        for _ in range(SCHEDULE_TICKS):
            after = schedule.next_tick(after=after)
            ticks.append(after)
        arguments = views.format_json(
            {"args": list(schedule.args), "kwargs": dict(schedule.kwargs)}
        )
        rows.append((schedule, ticks, arguments))
    leader = await board.read(("active_beat",), board.app.active_beat)
    return board.render(
        request,
        "schedules.html",
        {"page": "schedules", "schedules": rows, "beat": views.beat_row(leader, now)},
    )


async def enqueue_form(request: Request) -> Response:
    board = _board(request)
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


# -------------------------------------------------------------------------- actions


async def retry(request: Request) -> Response:
    return await _job_action(request, "retry")


async def cancel(request: Request) -> Response:
    return await _job_action(request, "cancel")


async def _job_action(request: Request, action: str) -> Response:
    board = _board(request)
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
    return _see(request, "job", f"notice={notice}", job_id=job_id)


async def bulk_confirm(request: Request) -> Response:
    board = _board(request)
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
    board = _board(request)
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
    return _see(request, "jobs", urlencode({**shown, "notice": notice, "n": changed}))


async def enqueue(request: Request) -> Response:
    board = _board(request)
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
    return _see(request, "job", "notice=enqueued", job_id=ref.id)


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


async def login_form(request: Request) -> Response:
    board = _board(request)
    if board.token is None:
        return board.error(request, 404, "Not found", "This dashboard has no token sign-in.")
    return board.render(request, "login.html", {"page": "login", "problem": None})


async def login(request: Request) -> Response:
    board = _board(request)
    if board.token is None:
        return board.error(request, 404, "Not found", "This dashboard has no token sign-in.")
    checked = await board.change(request)
    if isinstance(checked, Response):
        return checked
    form, session = checked
    if not is_token(form.get("token"), board.token):
        logger.warning("dashboard sign-in refused: wrong token")
        return board.render(
            request,
            "login.html",
            {"page": "login", "problem": "That is not the dashboard's token."},
            status_code=403,
            session=session,
        )
    response = _see(request, "overview", "notice=signed-in")
    board.set_cookie(request, response, board.signer.new_session(is_signed_in=True))
    return response


async def logout(request: Request) -> Response:
    board = _board(request)
    checked = await board.change(request)
    if isinstance(checked, Response):
        return checked
    response = _see(request, "overview", "notice=signed-out")
    board.set_cookie(request, response, board.signer.new_session(is_signed_in=False))
    return response


# -------------------------------------------------------------------------- helpers


def _board(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.dashboard
    return board


def _url(request: Request, name: str, **params: str) -> str:
    """A path to one of the dashboard's routes, under wherever it is mounted.

    Resolved on the dashboard's own routes (``request.app`` is the dashboard's
    Starlette even when mounted), not the host application's, whose router
    cannot see names inside an unnamed mount.
    """
    dashboard: Starlette = request.app
    return _root(request) + str(dashboard.url_path_for(name, **params))


def _root(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def _see(request: Request, name: str, query: str = "", **params: str) -> RedirectResponse:
    """Redirect after a POST to a page the browser then GETs (303: no re-submission)."""
    target = _url(request, name, **params)
    if query:
        target = f"{target}?{query}"
    return RedirectResponse(target, status_code=303)


async def _unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("dashboard: %s", exc)
    return _board(request).error(request, 503, "Database unavailable", str(exc))


async def _failed(request: Request, exc: Exception) -> Response:
    logger.warning("dashboard: %s", exc)
    return _board(request).error(request, 500, "Error", str(exc))


class _RootPath:
    """Tells the routes where they are mounted when the server in front does not."""

    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self._app = app
        self._root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("root_path"):
            scope = {**scope, "root_path": self._root_path}
        await self._app(scope, receive, send)


def create_app(
    app: App,
    *,
    token: str | None = None,
    read_only: bool = False,
    root_path: str = "",
    authorize: Authorize | None = None,
    secret: bytes | None = None,
    live_interval: float = 2.0,
) -> ASGIApp:
    """The dashboard of ``app`` as an ASGI application, to serve or to mount.

    Options:
        token: the secret that signs a browser in for changes (retry, cancel,
            enqueue). Without it (and without ``authorize``) pass ``read_only=True``.
        read_only: show everything, change nothing, show no action buttons.
        root_path: the URL prefix the dashboard is served under when the
            server in front strips it and does not say so (Starlette's
            ``Mount`` and WSGI's ``SCRIPT_NAME`` say so already).
        authorize: ``request -> bool``, for a host application with its own
            sign-in (the hook the Django integration uses): a request it
            approves may change things without the token.
        secret: signing key for sessions when there is no token (several
            processes behind ``authorize`` must share one).
        live_interval: seconds between live refreshes; also how long a read
            is shared between viewers.

    Example::

        from fastapi import FastAPI
        api = FastAPI()
        api.mount("/venturi", venturi.dashboard.create_app(app, token=os.environ["TOKEN"]))
    """
    board = Dashboard(
        app,
        token=token,
        read_only=read_only,
        authorize=authorize,
        secret=secret,
        live_interval=live_interval,
    )
    routes = [
        Route("/", overview, name="overview"),
        Route("/jobs", jobs, name="jobs"),
        Route("/jobs/bulk", bulk_confirm, name="bulk_confirm"),
        Route("/jobs/bulk", bulk, methods=["POST"], name="bulk"),
        Route("/jobs/{job_id}", job, name="job"),
        Route("/jobs/{job_id}/retry", retry, methods=["POST"], name="retry"),
        Route("/jobs/{job_id}/cancel", cancel, methods=["POST"], name="cancel"),
        Route("/workflows", workflows, name="workflows"),
        Route("/workflows/{workflow_id}", workflow, name="workflow"),
        Route("/workers", workers, name="workers"),
        Route("/schedules", schedules, name="schedules"),
        Route("/enqueue", enqueue_form, name="enqueue"),
        Route("/enqueue", enqueue, methods=["POST"], name="enqueue_post"),
        Route("/login", login_form, name="login"),
        Route("/login", login, methods=["POST"], name="login_post"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    starlette = Starlette(
        routes=routes,
        exception_handlers={BackendUnavailable: _unavailable, VenturiError: _failed},
    )
    starlette.state.dashboard = board
    asgi: ASGIApp = SecurityHeaders(starlette)
    if root_path:
        asgi = _RootPath(asgi, "/" + root_path.strip("/"))
    return asgi


def create_wsgi_app(app: App, **options: Any) -> Callable[..., Any]:
    """``create_app`` for WSGI servers (Flask, Django, gunicorn): the same options.

    Served through ``a2wsgi``, which runs the ASGI app on an event loop
    thread of its own; live updates poll, so no request is held open.
    """
    from a2wsgi import ASGIMiddleware

    return ASGIMiddleware(create_app(app, **options))  # type: ignore[arg-type]
