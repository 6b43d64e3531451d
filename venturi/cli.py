"""The ``venturi`` command line: operate a queue from a shell or a script.

Subcommands: ``migrate``, ``worker``, ``beat``, ``jobs list|show|retry|cancel``,
``cleanup``, ``stats`` and ``workers``. Each takes ``--app module:attribute``
(the user's App; importing its module registers its tasks), ``--database-url`` and
``--prefix`` (which override the App's own settings), before or after the
subcommand name. Without ``--app`` the App is built from the options, then
``$VENTURI_DATABASE_URL`` / ``$VENTURI_PREFIX``, enough for everything but
``worker`` and ``beat``.

Results go to stdout, as aligned tables or, with ``--json``, as one JSON
document (datetimes ISO 8601 in UTC, durations in seconds). Any failure is one
line on stderr starting ``venturi: error:`` and a non-zero exit status: 2 for
bad usage or input (unknown option, bad duration, bad prefix, a ``--app`` that
does not import), 1 for operational errors (database unreachable, unknown job
id, a job whose status forbids the operation). A usage error ends by naming
the help to read (``(see venturi worker --help)``). ``-v`` adds DEBUG logs,
and the traceback of an error, on stderr; the CLI, not the library, configures
logging (``venturi.logs``): ``worker`` and ``beat`` log at INFO by default, as
text or (``--log-format json``) one JSON object a line.
A warning about the queue (``stats``: kinds no live worker serves) is one line
on stderr starting ``venturi: warning:``, with exit status 0.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import logging
import os
import re
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

import orjson

from venturi import logs
from venturi.errors import ConfigurationError, VenturiError, describe_exception
from venturi.types import (
    Cursor,
    JobDetail,
    JobRow,
    JournalEntry,
    Stats,
    Status,
    WorkerInfo,
    Workflow,
    decode_cursor,
    encode_cursor,
)

if TYPE_CHECKING:
    from venturi.app import App

logger = logging.getLogger(__name__)

PROG = "venturi"
PREFIX_ENV = "VENTURI_PREFIX"
DEFAULT_PREFIX = "venturi"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_DEFAULT_LIST_LIMIT = 50

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_DURATION_HINT = "use a number and a unit s, m, h, d or w, e.g. 30s, 15m, 12h, 7d, 2w or 1h30m"
#: Widest ``NOTE`` cell of ``jobs list``; ``jobs show`` has the whole note.
_NOTE_COLUMN_CHARS = 40


class UsageError(Exception):
    """Bad command-line input; reported as one line with exit status 2.

    ``command`` is the command whose ``--help`` the line points to (``venturi
    jobs list``); ``None`` leaves it to ``main``, which knows the command parsed.
    """

    def __init__(self, message: str, *, command: str | None = None) -> None:
        super().__init__(message)
        self.command = command


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, raised rather than printed.

    argparse's own ``error`` prints the usage block and exits; the CLI promises
    a single ``venturi: error:`` line, so errors travel up to ``main``.
    """

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{where}: {message}" if where else message, command=self.prog)


# ---------------------------------------------------------------- input values


def parse_duration(text: str) -> timedelta:
    """Parse ``30s``, ``15m``, ``12h``, ``7d``, ``2w`` or a sum such as ``1h30m``.

    A unit is required (``7`` alone is refused: seconds or days?). Raises
    ``ValueError`` with a message that shows the accepted forms.
    """
    value = text.strip().lower()
    if not _DURATION.fullmatch(value):
        raise ValueError(f"invalid duration {text!r}: {_DURATION_HINT}")
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(value))
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"invalid duration {text!r}: too large") from None


def _duration_argument(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds_argument(text: str) -> float:
    """Seconds as a plain number (``30``, ``2.5``) or as a duration (``1m``)."""
    try:
        seconds = float(text)
    except ValueError:
        return _duration_argument(text).total_seconds()
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid seconds {text!r}: must be a finite number >= 0")
    return seconds


def _positive_int_argument(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a positive integer")
    return value


def _prefetch_argument(text: str) -> int:
    from venturi.worker import MAX_PREFETCH

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_PREFETCH:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: must be 0 or a positive integer up to {MAX_PREFETCH}"
        )
    return value


def _kinds_argument(text: str) -> list[str]:
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    if not kinds:
        raise argparse.ArgumentTypeError(f"invalid kinds {text!r}: give a comma-separated list")
    return kinds


def _cursor_argument(text: str) -> Cursor:
    try:
        return decode_cursor(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -------------------------------------------------------------------- the App


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (``module`` alone means ``module:app``) and return the App.

    The current directory is importable, as with ``python -m``, so that
    ``venturi worker --app myproject.jobs:app`` works from the project root.
    Raises ``UsageError`` when the module or attribute cannot be loaded or is
    not an App; the user's own import-time error is named, not swallowed.
    """
    from venturi.app import App

    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "app"
    if not module_name or not all(part.isidentifier() for part in attribute.split(".")):
        raise UsageError(f"invalid --app {spec!r}: use module:attribute, e.g. myproject.jobs:app")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        logger.debug("importing %s failed", module_name, exc_info=True)
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise UsageError(f"cannot import module {module_name!r} (--app {spec})") from exc
        raise UsageError(
            f"importing {module_name!r} (--app {spec}) failed: {describe_exception(exc)}"
        ) from exc
    except Exception as exc:
        logger.debug("importing %s failed", module_name, exc_info=True)
        raise UsageError(
            f"importing {module_name!r} (--app {spec}) failed: {describe_exception(exc)}"
        ) from exc
    for name in attribute.split("."):
        if not hasattr(target, name):
            raise UsageError(
                f"module {module_name!r} has no attribute {attribute!r} (--app {spec})"
            )
        target = getattr(target, name)
    if not isinstance(target, App):
        kind = type(target).__name__
        raise UsageError(f"--app {spec} is an object of type {kind}, not a venturi.App")
    return target


def _open_app(args: argparse.Namespace) -> App:
    """The App a subcommand works on: ``--app`` with overrides, or one built from options/env."""
    from venturi.app import App

    database_url: str | None = getattr(args, "database_url", None)
    prefix: str | None = getattr(args, "prefix", None)
    spec: str | None = getattr(args, "app", None)
    pooler: dict[str, Any] = {
        "direct_url": getattr(args, "direct_url", None),
        "transaction_pooling": getattr(args, "transaction_pooling", None) or None,
    }
    if spec is None:
        return App(database_url, prefix or os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX, **pooler)
    app = load_app(spec)
    if database_url is not None or prefix is not None or any(pooler.values()):
        _override_settings(app, database_url=database_url, prefix=prefix, **pooler)
    return app


def _override_settings(
    app: App,
    *,
    database_url: str | None,
    prefix: str | None,
    direct_url: str | None = None,
    transaction_pooling: bool | None = None,
) -> None:
    """Point the user's own App (the object its tasks enqueue through) at other settings.

    The App builds its backend lazily, so until then its settings are plain
    values; once a backend exists (``backend=`` given, or used at import
    time) they can no longer change and the override is refused.
    """
    try:
        app.override(
            database_url=database_url,
            prefix=prefix,
            direct_url=direct_url,
            transaction_pooling=transaction_pooling,
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


# ------------------------------------------------------------------ commands


def _cmd_migrate(args: argparse.Namespace) -> int:
    with closing(_open_app(args)) as app:
        applied = app.migrate()
    if args.json:
        _write_json({"applied": [{"version": m.version, "name": m.name} for m in applied]})
    elif applied:
        _write_lines(f"applied V{m.version}__{m.name}" for m in applied)
    else:
        _write_lines(["schema is up to date"])
    return EXIT_OK


def _cmd_worker(args: argparse.Namespace) -> int:
    from venturi.worker import Worker

    with closing(_open_app(args)) as app:
        if not app.tasks():
            raise UsageError("no tasks to run: pass --app module:attribute to load your tasks")
        if args.metrics_port is not None:
            _serve_run_metrics(app, args.metrics_port)
        Worker(
            app,
            concurrency=args.concurrency,
            **(
                {"async_concurrency": args.async_concurrency}
                if args.async_concurrency is not None
                else {}
            ),
            kinds=args.kinds,
            grace=args.grace,
            retention=args.retention,
            prefetch=args.prefetch,
        ).run()
    return EXIT_OK


def _cmd_beat(args: argparse.Namespace) -> int:
    from venturi.beat import Beat

    with closing(_open_app(args)) as app:
        if not app.schedules():
            raise UsageError("no schedules to run: pass --app module:attribute to load your tasks")
        Beat(app).run()
    return EXIT_OK


def _cmd_jobs_list(args: argparse.Namespace) -> int:
    with closing(_open_app(args)) as app:
        page = app.job_summaries(
            status=args.status, kind=args.kind, limit=args.limit, after=args.after
        )
    next_cursor = encode_cursor(page.next) if page.next is not None else None
    if args.json:
        jobs = [{**_job_json(s.job), "last_note": s.last_note} for s in page.jobs]
        _write_json({"jobs": jobs, "next": next_cursor})
        return EXIT_OK
    if not page.jobs:
        _write_lines(["no jobs"])
    else:
        header = (
            "ID",
            "KIND",
            "STATUS",
            "PRIORITY",
            "RUNS",
            "FAILURES",
            "CREATED",
            "VISIBLE",
            "FINISHED",
            "NOTE",
        )
        rows = [
            (
                s.job.id,
                s.job.kind,
                s.job.status.value,
                s.job.priority.name.lower(),
                str(s.job.run_count),
                str(s.job.failure_count),
                _format_time(s.job.created_at),
                _format_time(s.job.visible_at),
                _format_time(s.job.finished_at),
                _short_note(s.last_note),
            )
            for s in page.jobs
        ]
        _write_lines(format_table(header, rows, right={4, 5}))
    if next_cursor is not None:
        _write_lines([f"next page: {_next_page_command(args, next_cursor)}"])
    return EXIT_OK


def _short_note(note: str | None) -> str:
    if note is None:
        return "-"
    text = _one_line(note)
    if len(text) > _NOTE_COLUMN_CHARS:
        return text[: _NOTE_COLUMN_CHARS - 3] + "..."
    return text


def _next_page_command(args: argparse.Namespace, cursor: str) -> str:
    """The command that prints the next page: the same App, database, prefix and filters.

    A database URL holding a password is left out (it would land in the
    terminal and the shell history); the reader passes it again themselves.
    """
    words = [PROG, "jobs", "list"]
    url: str | None = getattr(args, "database_url", None)
    options: list[tuple[str, object]] = [
        ("--app", getattr(args, "app", None)),
        ("--database-url", url if url is not None and not _has_password(url) else None),
        ("--prefix", getattr(args, "prefix", None)),
        ("--status", args.status),
        ("--kind", args.kind),
        ("--limit", args.limit if args.limit != _DEFAULT_LIST_LIMIT else None),
    ]
    for option, value in options:
        if value is not None:
            words += [option, str(value)]
    return shlex.join([*words, "--after", cursor])


def _has_password(url: str) -> bool:
    if "password" in url.lower():  # a key=value conninfo, or ?password= in a URL
        return True
    try:
        return urlsplit(url).password is not None
    except ValueError:
        return True


def _cmd_jobs_show(args: argparse.Namespace) -> int:
    with closing(_open_app(args)) as app:
        detail = app.job(args.id)
    if args.json:
        _write_json(_detail_json(detail))
    else:
        _write_lines(_detail_lines(detail))
    return EXIT_OK


#: The one status each bulk change acts on.
_BULK_STATUS = {"retry": Status.DEAD, "cancel": Status.PENDING}


def _bulk_change(args: argparse.Namespace, action: str) -> int:
    """``jobs retry|cancel --kind K [--note TEXT] [--yes]``: every matching job at once.

    Without ``--yes`` nothing changes: the command says how many jobs match,
    so the operator sees the blast radius first.
    """
    status = _BULK_STATUS[action]
    if args.kind is None and args.note is None:
        raise UsageError(f"give a job ID, or --kind/--note to {action} every matching job")
    with closing(_open_app(args)) as app:
        matching = app.count_jobs(status=status, kind=args.kind, note=args.note)
        changed = 0
        if args.yes:
            change = app.retry_matching if action == "retry" else app.cancel_matching
            changed = change(kind=args.kind, note=args.note)
    if args.json:
        _write_json({"matching": matching, "changed": changed, "applied": args.yes})
    elif args.yes:
        done = "retried" if action == "retry" else "cancelled"
        _write_lines([f"{done} {changed} of {matching} matching {status.value} job(s)"])
    else:
        _write_lines(
            [f"{matching} {status.value} job(s) match; nothing changed: add --yes to {action} them"]
        )
    return EXIT_OK


def _cmd_jobs_retry(args: argparse.Namespace) -> int:
    if args.id is None or args.kind is not None or args.note is not None:
        if args.id is not None:
            raise UsageError("give either a job ID or --kind/--note filters, not both")
        return _bulk_change(args, "retry")
    with closing(_open_app(args)) as app:
        job = app.retry(args.id)
    if args.json:
        _write_json(_job_json(job))
    else:
        visible_at = _format_time(job.visible_at, precise=True)
        _write_lines([f"job {job.id} retried: {job.status.value}, visible at {visible_at}"])
    return EXIT_OK


def _cmd_jobs_cancel(args: argparse.Namespace) -> int:
    if args.id is None or args.kind is not None or args.note is not None:
        if args.id is not None:
            raise UsageError("give either a job ID or --kind/--note filters, not both")
        return _bulk_change(args, "cancel")
    with closing(_open_app(args)) as app:
        job = app.cancel(args.id)
    if args.json:
        _write_json(_job_json(job))
    else:
        running = job.status is Status.CLAIMED
        _write_lines(
            [
                f"job {job.id} is running: cancellation requested (it ends dead, 'cancelled')"
                if running
                else f"job {job.id} cancelled: {job.status.value}"
            ]
        )
    return EXIT_OK


def _cmd_cleanup(args: argparse.Namespace) -> int:
    with closing(_open_app(args)) as app:
        deleted = app.cleanup(
            older_than=args.older_than, status=args.status, batch_size=args.batch_size
        )
    if args.json:
        _write_json({"deleted": deleted})
    else:
        noun = "job" if deleted == 1 else "jobs"
        what = f"{args.status} {noun}" if args.status else f"finished {noun}"
        _write_lines([f"deleted {deleted} {what} older than {format_age(args.older_than)}"])
    return EXIT_OK


def _cmd_stats(args: argparse.Namespace) -> int:
    with closing(_open_app(args)) as app:
        stats = app.stats()
        unserved = app.unserved_kinds()
    if args.json:
        _write_json({**_stats_json(stats), "unserved_kinds": unserved})
    elif not stats.kinds:
        _write_lines(["no jobs"])
    else:
        _write_lines(_stats_lines(stats))
    if unserved:
        _warn(f"no live worker serves these kinds, whose due jobs wait: {', '.join(unserved)}")
    return EXIT_OK


EXIT_NOT_RUNNING = 3
"""``venturi embedded status`` when no server runs, as ``systemctl status`` does."""


def _cmd_embedded_status(args: argparse.Namespace) -> int:
    from venturi.postgres.embedded import embedded_status

    server = embedded_status()
    if not server.running:
        _write_lines([f"embedded server not running (data {server.data_directory})"])
        return EXIT_NOT_RUNNING
    _write_lines(
        [
            f"embedded server running: pid {server.pid}, port {server.port}, "
            f"PostgreSQL {server.version}, url {server.url}, data {server.data_directory}"
        ]
    )
    return EXIT_OK


def _cmd_embedded_stop(args: argparse.Namespace) -> int:
    from venturi.postgres.embedded import embedded_directory, stop_embedded_server

    server = stop_embedded_server()
    if server is None:
        _write_lines(
            [f"embedded server not running, nothing to stop (data {embedded_directory()})"]
        )
    else:
        _write_lines([f"embedded server stopped: pid {server.pid} (data {server.data_directory})"])
    return EXIT_OK


def _cmd_workers(args: argparse.Namespace) -> int:
    with closing(_open_app(args)) as app:
        workers = app.workers()
    if args.json:
        _write_json({"workers": [_worker_json(worker) for worker in workers]})
    elif not workers:
        _write_lines(["no live workers"])
    else:
        _write_lines(_worker_lines(workers))
    return EXIT_OK


def _worker_lines(workers: Sequence[WorkerInfo]) -> list[str]:
    header = ("ID", "VERSION", "CONCURRENCY", "RUNNING", "STARTED", "HEARTBEAT", "KINDS")
    rows = [
        (
            worker.id,
            worker.version,
            str(worker.concurrency),
            str(worker.running),
            _format_time(worker.started_at),
            _format_time(worker.heartbeat_at, precise=True),
            ", ".join(worker.kinds) or "-",
        )
        for worker in workers
    ]
    return format_table(header, rows, right={2, 3})


def _worker_json(worker: WorkerInfo) -> dict[str, Any]:
    return {
        "id": worker.id,
        "claimed_by": worker.claimed_by,
        "version": worker.version,
        "kinds": list(worker.kinds),
        "concurrency": worker.concurrency,
        "running": worker.running,
        "started_at": _utc(worker.started_at),
        "heartbeat_at": _utc(worker.heartbeat_at),
        "expires_at": _utc(worker.expires_at),
    }


def _build_workers_command(parser: argparse.ArgumentParser) -> None:
    """``venturi workers``: the live entries of the worker registry (ADR 0119)."""
    parser.set_defaults(handler=_cmd_workers)
    _add_json_option(parser)


# -------------------------------------------------------------------- output


def format_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], *, right: Iterable[int] = ()
) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; ``right`` columns right-aligned.

    The last column is not padded, so a long note does not push trailing
    spaces onto every line.
    """
    table = [list(header), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    right_aligned = set(right)
    lines = []
    for row in table:
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def format_age(age: timedelta | None) -> str:
    """A short human duration: ``45s``, ``3m12s``, ``2h``, ``3d04h``; ``-`` for None."""
    if age is None:
        return "-"
    seconds = int(age.total_seconds())
    if seconds < 0:
        return "0s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{seconds:02d}s" if seconds else f"{minutes}m"
    return f"{seconds}s"


def _format_time(value: datetime | None, *, precise: bool = False) -> str:
    if value is None:
        return "-"
    utc = value.astimezone(UTC)
    if precise:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _compact_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _detail_lines(detail: JobDetail) -> list[str]:
    job = detail.job
    fields = [
        ("id", job.id),
        ("kind", job.kind),
        ("status", job.status.value),
        ("priority", f"{job.priority.name.lower()} ({job.priority.value})"),
        ("created_at", _format_time(job.created_at, precise=True)),
        ("visible_at", _format_time(job.visible_at, precise=True)),
        ("finished_at", _format_time(job.finished_at, precise=True)),
        ("claimed_by", job.claimed_by or "-"),
        ("claim_expires_at", _format_time(job.claim_expires_at, precise=True)),
        ("run_count", str(job.run_count)),
        ("failure_count", str(job.failure_count)),
        ("dedup_key", job.dedup_key if job.dedup_key is not None else "-"),
        ("payload", _compact_json(job.payload)),
        ("carry", _compact_json(job.carry)),
    ]
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    if not detail.journal:
        return [*lines, "", "timeline: no entries"]
    header = ("ENTRY", "RUN", "RECORDED", "OUTCOME", "ATTACHMENT", "NOTE")
    rows = [
        (
            str(entry.id),
            str(entry.run_no),
            _format_time(entry.recorded_at, precise=True),
            entry.outcome.value,
            _compact_json(entry.attachment) if entry.attachment is not None else "-",
            _one_line(entry.note) if entry.note is not None else "-",
        )
        for entry in detail.journal
    ]
    return [
        *lines,
        "",
        "timeline:",
        *format_table(header, rows, right={0, 1}),
        *_traceback_lines(detail),
    ]


def _traceback_lines(detail: JobDetail) -> list[str]:
    """Each failed run's stored traceback, indented, after the timeline (ADR 0121)."""
    lines: list[str] = []
    for entry in detail.journal:
        if entry.traceback is not None:
            lines += ["", f"traceback of entry {entry.id} (run {entry.run_no}, {entry.outcome}):"]
            lines += [f"  {line}" for line in entry.traceback.rstrip("\n").splitlines()]
    return lines


def _stats_lines(stats: Stats) -> list[str]:
    statuses = list(Status)
    header = ("KIND", *(s.value.upper() for s in statuses), "SCHEDULED", "OLDEST ELIGIBLE")
    rows = [
        (
            kind.kind,
            *(str(kind.counts.get(s, 0)) for s in statuses),
            str(kind.scheduled),
            format_age(kind.oldest_eligible_age),
        )
        for kind in stats.kinds
    ]
    totals = (
        "TOTAL",
        *(str(sum(k.counts.get(s, 0) for k in stats.kinds)) for s in statuses),
        str(sum(k.scheduled for k in stats.kinds)),
        format_age(stats.oldest_eligible_age),
    )
    return format_table(header, [*rows, totals], right=range(1, len(header)))


def _total_seconds(age: timedelta | None) -> float | None:
    return age.total_seconds() if age is not None else None


def _utc(value: datetime | None) -> datetime | None:
    return value.astimezone(UTC) if value is not None else None


def _job_json(job: JobRow) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "status": job.status.value,
        "priority": int(job.priority),
        "payload": job.payload,
        "carry": job.carry,
        "dedup_key": job.dedup_key,
        "created_at": _utc(job.created_at),
        "visible_at": _utc(job.visible_at),
        "finished_at": _utc(job.finished_at),
        "claimed_by": job.claimed_by,
        "claim_expires_at": _utc(job.claim_expires_at),
        "run_count": job.run_count,
        "failure_count": job.failure_count,
        "cancel_requested_at": _utc(job.cancel_requested_at),
    }


def _entry_json(entry: JournalEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "run_no": entry.run_no,
        "recorded_at": _utc(entry.recorded_at),
        "outcome": entry.outcome.value,
        "note": entry.note,
        "attachment": entry.attachment,
        "traceback": entry.traceback,
    }


def _detail_json(detail: JobDetail) -> dict[str, Any]:
    return {"job": _job_json(detail.job), "journal": [_entry_json(e) for e in detail.journal]}


def _stats_json(stats: Stats) -> dict[str, Any]:
    return {
        "kinds": [
            {
                "kind": kind.kind,
                "counts": {s.value: kind.counts.get(s, 0) for s in Status},
                "scheduled": kind.scheduled,
                "oldest_eligible_age_seconds": _total_seconds(kind.oldest_eligible_age),
            }
            for kind in stats.kinds
        ],
        "oldest_eligible_age_seconds": _total_seconds(stats.oldest_eligible_age),
    }


def _write_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode())
    sys.stdout.write("\n")


def _write_lines(lines: Iterable[str]) -> None:
    for line in lines:
        sys.stdout.write(line + "\n")


# -------------------------------------------------------------------- parser


def _add_app_options(parser: argparse.ArgumentParser, *, nested: bool) -> None:
    """The options every subcommand takes.

    They are declared on the top-level parser too (``venturi --app x worker``,
    Celery's habit); on subcommands their default is SUPPRESS so that a value
    given before the subcommand name is not reset by the subparser's default.
    """
    default: Any = argparse.SUPPRESS if nested else None
    group = parser.add_argument_group("app and database")
    group.add_argument(
        "--app",
        metavar="MODULE:ATTRIBUTE",
        default=default,
        help="your venturi.App, e.g. myproject.jobs:app (importing it registers its tasks)",
    )
    group.add_argument(
        "--database-url",
        metavar="URL",
        default=default,
        help="PostgreSQL URL; default: the App's own, else $VENTURI_DATABASE_URL",
    )
    group.add_argument(
        "--direct-url",
        metavar="URL",
        default=default,
        help="the server's own URL when --database-url is PgBouncer in transaction mode "
        "(LISTEN, beat leadership, migrate); default: $VENTURI_DIRECT_DATABASE_URL",
    )
    group.add_argument(
        "--transaction-pooling",
        action="store_true",
        default=default,
        help="--database-url is a transaction-mode pooler (implied by --direct-url); "
        "without --direct-url workers poll for new jobs",
    )
    group.add_argument(
        "--prefix",
        default=default,
        help=f"table prefix; default: the App's own, else ${PREFIX_ENV}, else {DEFAULT_PREFIX!r}",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if nested else False,
        help="log at DEBUG level, and print tracebacks of errors",
    )


def _add_log_options(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format``, for the long-running services."""
    group = parser.add_argument_group("logging")
    group.add_argument(
        "--log-level",
        type=str.upper,
        choices=logs.LEVELS,
        default=None,
        metavar="LEVEL",
        help="DEBUG, INFO (default; one line per run end), WARNING, ERROR or CRITICAL",
    )
    group.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="text",
        help="text (default) or json: one JSON object a line, with time, level, logger, "
        "message, job_id, kind and exception fields",
    )


def _add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of a table"
    )


def _version() -> str:
    try:
        return importlib.metadata.version("venturi")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each leaf sets ``handler`` to the function that runs it."""
    parser = _Parser(
        prog=PROG,
        description="venturi: PostgreSQL-backed background jobs.",
        epilog=(
            "durations: 30s, 15m, 12h, 7d, 2w (or sums: 1h30m). "
            "exit status: 0 ok, 1 operational error, 2 usage error."
        ),
    )
    _add_app_options(parser, nested=False)
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        group: argparse._SubParsersAction[_Parser],
        name: str,
        help_text: str,
        handler: Callable[[argparse.Namespace], int] | None,
    ) -> _Parser:
        sub = group.add_parser(name, help=help_text, description=help_text)
        _add_app_options(sub, nested=True)
        if handler is not None:
            sub.set_defaults(handler=handler)
        return sub

    migrate = command(commands, "migrate", "apply pending schema migrations", _cmd_migrate)
    _add_json_option(migrate)

    worker = command(commands, "worker", "run a worker until SIGTERM/SIGINT", _cmd_worker)
    _add_log_options(worker)
    worker.add_argument(
        "--concurrency",
        type=_positive_int_argument,
        default=8,
        metavar="N",
        help="handler threads (default: 8)",
    )
    worker.add_argument(
        "--async-concurrency",
        type=_positive_int_argument,
        default=None,
        metavar="N",
        help="async handlers running at once on the worker's event loop (default: 100)",
    )
    worker.add_argument(
        "--kinds",
        type=_kinds_argument,
        default=None,
        metavar="A,B",
        help="serve only these kinds (default: every task of the App)",
    )
    worker.add_argument(
        "--grace",
        type=_seconds_argument,
        default=30.0,
        metavar="SECONDS",
        help="on shutdown, how long running handlers may finish (default: 30)",
    )
    worker.add_argument(
        "--retention",
        type=_duration_argument,
        default=None,
        metavar="DURATION",
        help="delete terminal jobs finished longer ago than this, e.g. 7d (default: keep all)",
    )

    worker.add_argument(
        "--prefetch",
        type=_prefetch_argument,
        default=None,
        metavar="N",
        help="most claimed jobs held for busy handlers, only while jobs are short "
        "(default: 256, at most 1000; 0: claim only for free handlers)",
    )

    beat = command(
        commands, "beat", "run the periodic scheduler (one active per prefix)", _cmd_beat
    )
    _add_log_options(beat)

    jobs = command(commands, "jobs", "inspect and act on jobs", None)
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)
    statuses = [s.value for s in Status]

    listing = command(actions, "list", "list jobs, newest first", _cmd_jobs_list)
    listing.add_argument("--status", choices=statuses, help="only jobs in this status")
    listing.add_argument("--kind", help="only jobs of this kind")
    listing.add_argument(
        "--limit",
        type=_positive_int_argument,
        default=_DEFAULT_LIST_LIMIT,
        metavar="N",
        help="jobs per page (default: 50)",
    )
    listing.add_argument(
        "--after",
        type=_cursor_argument,
        metavar="CURSOR",
        help="continue after the cursor printed with the previous page",
    )
    _add_json_option(listing)

    show = command(actions, "show", "a job and its timeline", _cmd_jobs_show)
    show.add_argument("id", metavar="ID", help="the job id")
    _add_json_option(show)
    for name, help_text, handler in (
        ("retry", "make dead jobs pending again, eligible now", _cmd_jobs_retry),
        ("cancel", "make pending jobs dead (note 'cancelled')", _cmd_jobs_cancel),
    ):
        sub = command(actions, name, help_text, handler)
        sub.add_argument("id", metavar="ID", nargs="?", help="one job, by id")
        sub.add_argument("--kind", help="instead of an ID: every matching job of this kind")
        sub.add_argument("--note", help="instead of an ID: jobs whose last note contains this")
        sub.add_argument(
            "--status",
            choices=[_BULK_STATUS[name].value],
            help="the status a bulk change acts on (the only one it may)",
        )
        sub.add_argument("--yes", action="store_true", help="apply a bulk change (else: count)")
        _add_json_option(sub)
    _add_jobs_add_command(actions)

    cleanup = command(commands, "cleanup", "delete old completed/dead jobs", _cmd_cleanup)
    cleanup.add_argument(
        "--older-than",
        type=_duration_argument,
        required=True,
        metavar="DURATION",
        help="delete jobs finished longer ago than this, e.g. 7d",
    )
    cleanup.add_argument(
        "--status",
        choices=[s.value for s in Status if s.is_terminal],
        help="only this terminal status (default: both)",
    )
    cleanup.add_argument(
        "--batch-size",
        type=_positive_int_argument,
        default=1000,
        metavar="N",
        help="rows deleted per transaction (default: 1000)",
    )
    _add_json_option(cleanup)

    embedded = command(commands, "embedded", "the embedded server used without a URL", None)
    acts = embedded.add_subparsers(dest="action", metavar="ACTION", required=True)
    command(acts, "status", "is it running? exit 0 if so, 3 if not", _cmd_embedded_status)
    command(acts, "stop", "stop it: it outlives the programs using it", _cmd_embedded_stop)

    stats = command(commands, "stats", "job counts per kind and status", _cmd_stats)
    _add_json_option(stats)

    def run_dashboard(args: argparse.Namespace) -> int:
        """Serve the web dashboard (the ``dashboard`` extra) until SIGINT/SIGTERM."""
        import secrets
        import signal

        try:
            import uvicorn

            from venturi.dashboard import create_app
        except ImportError as exc:
            raise UsageError(
                f"the dashboard needs its extra: pip install 'venturi[dashboard]' ({exc})"
            ) from None
        token = None if args.read_only else args.token or os.environ.get(DASHBOARD_TOKEN_ENV)
        with closing(_open_app(args)) as app:
            if not args.read_only and token is None:
                token = secrets.token_urlsafe(24)
                _write_lines([f"dashboard token (sign in with it to make changes): {token}"])
            asgi = create_app(app, token=token, read_only=args.read_only)
            mode = "read-only" if args.read_only else "changes need the token"
            _write_lines([f"venturi dashboard on http://{args.host}:{args.port}/ ({mode})"])
            # uvicorn stops on SIGINT/SIGTERM, then re-raises the signal to the handler
            # it found: a no-op one makes a requested stop exit 0, as `worker` does.
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda *_: None)
            uvicorn.run(asgi, host=args.host, port=args.port, log_level="warning")
        return EXIT_OK

    dashboard = command(
        commands, "dashboard", "serve the web dashboard (loopback only by default)", run_dashboard
    )
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)"
    )
    dashboard.add_argument(
        "--port", type=_positive_int_argument, default=8080, help="port (default: 8080)"
    )
    access = dashboard.add_mutually_exclusive_group()
    access.add_argument(
        "--token",
        metavar="T",
        help=f"token that allows changes (default: ${DASHBOARD_TOKEN_ENV}, else a random one, "
        "printed at start)",
    )
    access.add_argument("--read-only", action="store_true", help="show everything, allow no change")
    _build_workers_command(command(commands, "workers", "the live workers of the prefix", None))
    _add_metrics_port_option(worker)
    _build_metrics_command(
        command(commands, "metrics", "serve the queue gauges to Prometheus (/metrics)", None)
    )
    flows = command(commands, "workflows", "inspect workflows (chains, chords)", None)
    flow_actions = flows.add_subparsers(dest="action", metavar="ACTION", required=True)
    flow_show = command(flow_actions, "show", "every step of a workflow", _cmd_workflows_show)
    flow_show.add_argument("id", metavar="ID", help="the workflow id (ref.id of its delay())")
    _add_json_option(flow_show)
    return parser


# ------------------------------------------------------------------ jobs add


def _json_object_argument(text: str) -> dict[str, Any]:
    """The keyword arguments as Python would pass them; the task then checks them as JSON.

    Parsed by the standard library, not orjson, which would turn an integer
    beyond 64 bits into an inexact float instead of letting the task refuse it.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON {text!r}: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a JSON object: give the keyword arguments, e.g. '{{\"n\": 1}}'"
        )
    return value


def _countdown_argument(text: str) -> float | timedelta:
    """Seconds (``30``) or a duration (``1m30s``); its range is checked as ``.delay()`` does."""
    try:
        return float(text)
    except ValueError:
        return _duration_argument(text)


def _eta_argument(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid eta {text!r}: use ISO 8601 with a time zone, e.g. 2030-01-01T09:00:00Z"
        ) from None


def _cmd_jobs_add(args: argparse.Namespace) -> int:
    """Enqueue one job of a kind the App's tasks declare, through ``apply_async``.

    The task checks the arguments exactly as ``.delay()`` does (binding, JSON,
    delay, tier, dedup key), so a call refused here would be refused in Python
    too; such refusals are bad input (exit 2) and write nothing.
    """
    from venturi.errors import EnqueueError
    from venturi.types import Priority

    with closing(_open_app(args)) as app:
        known = app.tasks()
        if not known:
            raise UsageError(
                f"no tasks are known, so kind {args.kind!r} cannot be checked: pass --app "
                "module:attribute (your App, whose tasks declare the kinds)"
            )
        task = known.get(args.kind)
        if task is None:
            raise UsageError(f"unknown kind {args.kind!r}; known kinds: {', '.join(sorted(known))}")
        try:
            ref = task.apply_async(
                kwargs=args.arguments,
                countdown=args.countdown,
                eta=args.eta,
                priority=Priority[args.priority.upper()] if args.priority else None,
                dedup_key=args.dedup_key,
            )
        except EnqueueError as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        _write_json({"id": ref.id, "merged": ref.merged})
    else:
        _write_lines([f"{ref.id} merged" if ref.merged else ref.id])
    return EXIT_OK


def _add_jobs_add_command(actions: argparse._SubParsersAction[_Parser]) -> None:
    from venturi.types import Priority

    help_text = "enqueue one job of KIND, checked like .delay() (needs --app)"
    sub = actions.add_parser("add", help=help_text, description=help_text)
    _add_app_options(sub, nested=True)
    sub.set_defaults(handler=_cmd_jobs_add)
    sub.add_argument("kind", metavar="KIND", help="a kind declared by one of the App's tasks")
    sub.add_argument(
        "arguments",
        metavar="JSON",
        nargs="?",
        type=_json_object_argument,
        default={},
        help="the handler's keyword arguments as a JSON object (default: {})",
    )
    sub.add_argument(
        "--countdown",
        type=_countdown_argument,
        metavar="SECONDS",
        help="eligible after this many seconds (or a duration such as 15m)",
    )
    sub.add_argument(
        "--eta",
        type=_eta_argument,
        metavar="ISO8601",
        help="eligible at this time, with a time zone (not with --countdown)",
    )
    sub.add_argument(
        "--priority",
        choices=[p.name.lower() for p in Priority],
        help="this job's tier instead of the task's",
    )
    sub.add_argument("--dedup-key", metavar="KEY", help="instead of the task's dedup function")
    _add_json_option(sub)


DASHBOARD_TOKEN_ENV = "VENTURI_DASHBOARD_TOKEN"


# ---------------------------------------------------------------------- main


def _report(message: str, *, help_of: str | None = None) -> None:
    """The one error line; a usage error's ends by naming the ``--help`` to read."""
    hint = f" (see {help_of} --help)" if help_of is not None else ""
    sys.stderr.write(f"{PROG}: error: {_one_line(message)}{hint}\n")


def _command_of(args: argparse.Namespace) -> str:
    """``venturi jobs list``: the command ``args`` were parsed for."""
    words = [PROG, args.command, getattr(args, "action", None)]
    return " ".join(word for word in words if word)


def _warn(message: str) -> None:
    """A warning about the queue on stderr: stdout stays the report, as before."""
    sys.stderr.write(f"{PROG}: warning: {_one_line(message)}\n")


def _configure_logging(args: argparse.Namespace) -> None:
    """DEBUG with ``-v``; else INFO for services (or ``--log-level``), WARNING for
    one-shot commands.

    Long-running services show their lifecycle and one line per run end. A
    one-shot command ends in one line that says what failed, so the connection
    pool's retry warnings (one per attempt while the database is unreachable)
    stay out of it.
    """
    is_service = args.command in ("worker", "beat", "metrics")
    if args.verbose:
        level: int | str = logging.DEBUG
    elif is_service:
        level = args.log_level or logging.INFO
    else:
        level = logging.WARNING
    logs.configure(level, getattr(args, "log_format", "text"))
    if not args.verbose and not is_service:
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status instead of exiting (the console script exits)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        _report(str(exc), help_of=exc.command or PROG)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version print and "exit"
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    _configure_logging(args)
    try:
        status: int = args.handler(args)
    except UsageError as exc:
        logger.debug("usage error", exc_info=True)
        _report(str(exc), help_of=exc.command or _command_of(args))
        return EXIT_USAGE
    except ConfigurationError as exc:
        logger.debug("configuration error", exc_info=True)
        _report(str(exc), help_of=_command_of(args))
        return EXIT_USAGE
    except VenturiError as exc:
        logger.debug("operation failed", exc_info=True)
        _report(str(exc))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``venturi jobs list | head``): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:
        logger.debug("unexpected error", exc_info=True)
        _report(f"unexpected {describe_exception(exc)} (run with -v for the traceback)")
        return EXIT_FAILURE
    return status


# -- metrics (venturi[prometheus], ADR 0127) ------------------------------------------


def _add_metrics_port_option(worker: argparse.ArgumentParser) -> None:
    worker.add_argument(
        "--metrics-port",
        type=_port_argument,
        default=None,
        metavar="N",
        help="serve this worker's run metrics on http://0.0.0.0:N/metrics "
        "(needs venturi[prometheus]; queue gauges: `venturi metrics`)",
    )


def _build_metrics_command(parser: argparse.ArgumentParser) -> None:
    _add_log_options(parser)
    parser.add_argument(
        "--port", type=_port_argument, default=9464, metavar="N", help="default: 9464"
    )
    parser.add_argument(
        "--host", default="0.0.0.0", metavar="HOST", help="address to bind (default: 0.0.0.0)"
    )
    parser.add_argument(
        "--interval",
        type=_seconds_argument,
        default=15.0,
        metavar="SECONDS",
        help="read the queue's stats at most this often, however often it is scraped (default: 15)",
    )
    parser.set_defaults(handler=_cmd_metrics)


def _port_argument(text: str) -> int:
    port = _positive_int_argument(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: must be 1-65535")
    return port


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise UsageError(
            "metrics need prometheus-client: pip install 'venturi[prometheus]'"
        ) from None
    return prometheus_client


def _serve_run_metrics(app: App, port: int) -> None:
    prometheus_client = _prometheus()
    from venturi.contrib.prometheus import RunMetrics

    RunMetrics(app)
    prometheus_client.start_http_server(port)
    logger.info("serving run metrics on port %d (/metrics)", port)


def _cmd_metrics(args: argparse.Namespace) -> int:
    prometheus_client = _prometheus()
    from venturi.contrib.prometheus import QueueMetrics

    stop = threading.Event()
    with closing(_open_app(args)) as app:
        app.check_schema()
        registry = prometheus_client.CollectorRegistry()
        QueueMetrics(app, min_interval=args.interval, registry=registry)
        server, thread = prometheus_client.start_http_server(
            args.port, addr=args.host, registry=registry
        )
        logger.info(
            "serving queue metrics of prefix %s on %s:%d (/metrics)",
            app.prefix,
            args.host,
            args.port,
        )
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        stop.wait()
        server.shutdown()
        thread.join()
    return EXIT_OK


# ----------------------------------------------------------------- workflows


def _cmd_workflows_show(args: argparse.Namespace) -> int:
    """``venturi workflows show ID``: the steps in position order (ADR 0125)."""
    with closing(_open_app(args)) as app:
        workflow = app.workflow(args.id)
    if args.json:
        _write_json(_workflow_json(workflow))
    else:
        _write_lines(_workflow_lines(workflow))
    return EXIT_OK


def _workflow_lines(workflow: Workflow) -> list[str]:
    header = ("POS", "ID", "KIND", "STATE", "PARENTS", "FINISHED", "NOTE")
    rows = [
        (
            str(step.position),
            step.id,
            step.kind,
            step.state.value,
            ",".join(step.parents) or "-",
            _format_time(step.finished_at),
            _one_line(step.note) if step.note is not None else "-",
        )
        for step in workflow.steps
    ]
    return [
        f"workflow {workflow.id}: {workflow.state.value}, {len(workflow.steps)} step(s)",
        "",
        *format_table(header, rows, right={0}),
    ]


def _workflow_json(workflow: Workflow) -> dict[str, Any]:
    return {
        "id": workflow.id,
        "state": workflow.state.value,
        "steps": [
            {
                "id": step.id,
                "kind": step.kind,
                "state": step.state.value,
                "parents": list(step.parents),
                "position": step.position,
                "note": step.note,
                "finished_at": _utc(step.finished_at),
            }
            for step in workflow.steps
        ],
    }
