"""``venturi jobs list|show|retry|cancel|add``: inspect and act on jobs.

``list`` pages newest first with an opaque cursor (``venturi.cursor``);
``show`` prints a job, its stored result (read for a completed job only) and
its timeline; ``retry`` and ``cancel`` act on one job by id or, with ``--kind``/``--note``,
on every matching job once ``--yes`` says so; ``add`` enqueues one job of a
kind the App's tasks declare.
"""

from __future__ import annotations

import argparse
import json
import shlex
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from venturi.cli.common import (
    EXIT_OK,
    PROG,
    Commands,
    UsageError,
    add_command,
    add_json_option,
    add_read_url_option,
    compact_json,
    duration_argument,
    format_table,
    format_time,
    one_line,
    open_app,
    positive_int_argument,
    utc,
    write_json,
    write_lines,
)
from venturi.cli.steps import steps_json, steps_lines
from venturi.cursor import Cursor, decode_cursor, encode_cursor
from venturi.errors import EnqueueError, JobNotFound, ResultUnavailable
from venturi.types import JobDetail, JobRow, JournalEntry, Priority, Status

if TYPE_CHECKING:
    from venturi.app import App

__all__ = ["add_jobs"]

_DEFAULT_LIST_LIMIT = 50
#: Widest ``NOTE`` cell of ``jobs list``; ``jobs show`` has the whole note.
_NOTE_COLUMN_CHARS = 40
#: A result whose compact JSON is at most this long is shown on its ``result`` line.
_RESULT_INLINE_CHARS = 100
#: ``jobs show`` prints at most this much of a longer result's indented JSON (its
#: start, which shows its shape); ``--json`` carries all of it (up to the 1 MiB a
#: result may be).
_RESULT_SHOWN_CHARS = 10_000
#: The one status each bulk change acts on.
_BULK_STATUS = {"retry": Status.DEAD, "cancel": Status.PENDING}


def add_jobs(commands: Commands) -> None:
    """``venturi jobs`` and its actions, in the order ``venturi jobs --help`` lists them."""
    jobs = add_command(commands, "jobs", "inspect and act on jobs", None)
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_jobs_list(actions)
    show = add_command(actions, "show", "a job and its timeline", _cmd_jobs_show)
    show.add_argument("id", metavar="ID", help="the job id")
    add_read_url_option(show)
    add_json_option(show)
    for name, help_text, handler in (
        ("retry", "make dead jobs pending again, eligible now", _cmd_jobs_retry),
        ("cancel", "make pending jobs dead (note 'cancelled')", _cmd_jobs_cancel),
    ):
        sub = add_command(actions, name, help_text, handler)
        sub.add_argument("id", metavar="ID", nargs="?", help="one job, by id")
        sub.add_argument("--kind", help="instead of an ID: every matching job of this kind")
        sub.add_argument("--note", help="instead of an ID: jobs whose last note contains this")
        sub.add_argument(
            "--status",
            choices=[_BULK_STATUS[name].value],
            help="the status a bulk change acts on (the only one it may)",
        )
        sub.add_argument("--yes", action="store_true", help="apply a bulk change (else: count)")
        if name == "retry":
            sub.add_argument(
                "--reset-steps",
                action="store_true",
                help="one durable job: delete its recorded steps, so it starts over",
            )
        add_json_option(sub)
    _add_jobs_add(actions)


# ---------------------------------------------------------------------- list


def _add_jobs_list(actions: Commands) -> None:
    listing = add_command(actions, "list", "list jobs, newest first", _cmd_jobs_list)
    listing.add_argument(
        "--status", choices=[s.value for s in Status], help="only jobs in this status"
    )
    listing.add_argument("--kind", help="only jobs of this kind")
    listing.add_argument(
        "--limit",
        type=positive_int_argument,
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
    add_read_url_option(listing)
    add_json_option(listing)


def _cursor_argument(text: str) -> Cursor:
    try:
        return decode_cursor(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_jobs_list(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        page = app.job_summaries(
            status=args.status, kind=args.kind, limit=args.limit, after=args.after
        )
    next_cursor = encode_cursor(page.next) if page.next is not None else None
    if args.json:
        jobs = [{**_job_json(s.job), "last_note": s.last_note} for s in page.jobs]
        write_json({"jobs": jobs, "next": next_cursor})
        return EXIT_OK
    if not page.jobs:
        write_lines(["no jobs"])
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
                format_time(s.job.created_at),
                format_time(s.job.visible_at),
                format_time(s.job.finished_at),
                _short_note(s.last_note),
            )
            for s in page.jobs
        ]
        write_lines(format_table(header, rows, right={4, 5}))
    if next_cursor is not None:
        write_lines([f"next page: {_next_page_command(args, next_cursor)}"])
    return EXIT_OK


def _short_note(note: str | None) -> str:
    if note is None:
        return "-"
    text = one_line(note)
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


# ---------------------------------------------------------------------- show


@dataclass(frozen=True, slots=True)
class _Result:
    """A job's stored result as ``jobs show`` tells it: the value, or why there is none."""

    is_stored: bool
    value: Any = None
    missing: str | None = None


def _cmd_jobs_show(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        detail = app.job(args.id)
        result = _result_of(app, detail.job)
    if args.json:
        write_json(
            {
                **_detail_json(detail),
                "result": result.value,
                "result_stored": result.is_stored,
                "no_result": result.missing,
            }
        )
    else:
        write_lines(_detail_lines(detail, result))
    return EXIT_OK


def _result_of(app: App, job: JobRow) -> _Result:
    """The stored result, read (``App.result``, no wait) only for a completed job:
    the row says when there can be none, so the others cost no read."""
    if job.status is Status.DEAD:
        return _Result(False, missing="none: the job ended dead (the timeline says why)")
    if job.status is not Status.COMPLETED:
        return _Result(False, missing=f"none yet: the job is {job.status.value}, not completed")
    try:
        return _Result(True, app.result(job.id, timeout=0))
    except ResultUnavailable as exc:  # over result_max_bytes (the note says), or pre-V6
        return _Result(False, missing=f"none stored; its last note: {one_line(exc.note or '-')}")
    except JobNotFound:
        return _Result(False, missing="none: the job was cleaned up meanwhile")


def _result_lines(result: _Result) -> tuple[str, list[str]]:
    """The ``result`` line's value, and the indented JSON after the timeline when the
    result is too long for that line (cut at ``_RESULT_SHOWN_CHARS``); keys sorted,
    as the dashboard shows them."""
    if not result.is_stored:
        return str(result.missing), []
    inline = orjson.dumps(result.value, option=orjson.OPT_SORT_KEYS).decode()
    if len(inline) <= _RESULT_INLINE_CHARS:
        return inline, []
    text = orjson.dumps(result.value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    lines = ["", f"result ({len(text)} characters of JSON):"]
    lines += [f"  {line}" for line in text[:_RESULT_SHOWN_CHARS].splitlines()]
    if len(text) > _RESULT_SHOWN_CHARS:
        omitted = len(text) - _RESULT_SHOWN_CHARS
        lines.append(f"  [{omitted} more characters not shown: --json prints the whole result]")
    return "below, after the timeline", lines


def _detail_lines(detail: JobDetail, result: _Result) -> list[str]:
    job = detail.job
    shown, result_below = _result_lines(result)
    fields = [
        ("id", job.id),
        ("kind", job.kind),
        ("status", job.status.value),
        ("priority", f"{job.priority.name.lower()} ({job.priority.value})"),
        ("created_at", format_time(job.created_at, precise=True)),
        ("visible_at", format_time(job.visible_at, precise=True)),
        ("finished_at", format_time(job.finished_at, precise=True)),
        ("claimed_by", job.claimed_by or "-"),
        ("claim_expires_at", format_time(job.claim_expires_at, precise=True)),
        ("run_count", str(job.run_count)),
        ("failure_count", str(job.failure_count)),
        ("dedup_key", job.dedup_key if job.dedup_key is not None else "-"),
        ("payload", compact_json(job.payload)),
        ("carry", compact_json(job.carry)),
        ("result", shown),
    ]
    if job.expires_at is not None:  # ADR 0135; a job without an expiry shows no line for it
        fields.insert(6, ("expires_at", format_time(job.expires_at, precise=True)))
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    if not detail.journal:
        return [*lines, "", "timeline: no entries", *steps_lines(detail), *result_below]
    header = ("ENTRY", "RUN", "RECORDED", "OUTCOME", "ATTACHMENT", "NOTE")
    rows = [
        (
            str(entry.id),
            str(entry.run_no),
            format_time(entry.recorded_at, precise=True),
            entry.outcome.value,
            compact_json(entry.attachment) if entry.attachment is not None else "-",
            one_line(entry.note) if entry.note is not None else "-",
        )
        for entry in detail.journal
    ]
    return [
        *lines,
        "",
        "timeline:",
        *format_table(header, rows, right={0, 1}),
        *_traceback_lines(detail),
        *steps_lines(detail),
        *result_below,
    ]


def _traceback_lines(detail: JobDetail) -> list[str]:
    """Each failed run's stored traceback, indented, after the timeline (ADR 0121)."""
    lines: list[str] = []
    for entry in detail.journal:
        if entry.traceback is not None:
            lines += ["", f"traceback of entry {entry.id} (run {entry.run_no}, {entry.outcome}):"]
            lines += [f"  {line}" for line in entry.traceback.rstrip("\n").splitlines()]
    return lines


def _job_json(job: JobRow) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "status": job.status.value,
        "priority": int(job.priority),
        "payload": job.payload,
        "carry": job.carry,
        "dedup_key": job.dedup_key,
        "created_at": utc(job.created_at),
        "visible_at": utc(job.visible_at),
        "finished_at": utc(job.finished_at),
        "claimed_by": job.claimed_by,
        "claim_expires_at": utc(job.claim_expires_at),
        "run_count": job.run_count,
        "failure_count": job.failure_count,
        "cancel_requested_at": utc(job.cancel_requested_at),
    }


def _entry_json(entry: JournalEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "run_no": entry.run_no,
        "recorded_at": utc(entry.recorded_at),
        "outcome": entry.outcome.value,
        "note": entry.note,
        "attachment": entry.attachment,
        "traceback": entry.traceback,
    }


def _detail_json(detail: JobDetail) -> dict[str, Any]:
    job = {**_job_json(detail.job), "expires_at": utc(detail.job.expires_at)}
    return {"job": job, "journal": [_entry_json(e) for e in detail.journal], **steps_json(detail)}


# -------------------------------------------------------------- retry, cancel


def _cmd_jobs_retry(args: argparse.Namespace) -> int:
    if args.id is None or args.kind is not None or args.note is not None:
        if args.id is not None:
            raise UsageError("give either a job ID or --kind/--note filters, not both")
        if args.reset_steps:
            raise UsageError("--reset-steps applies to one job: give its ID")
        return _bulk_change(args, "retry")
    with closing(open_app(args)) as app:
        job = app.retry(args.id, reset_steps=args.reset_steps)
    if args.json:
        write_json(_job_json(job))
    else:
        visible_at = format_time(job.visible_at, precise=True)
        write_lines([f"job {job.id} retried: {job.status.value}, visible at {visible_at}"])
    return EXIT_OK


def _cmd_jobs_cancel(args: argparse.Namespace) -> int:
    if args.id is None or args.kind is not None or args.note is not None:
        if args.id is not None:
            raise UsageError("give either a job ID or --kind/--note filters, not both")
        return _bulk_change(args, "cancel")
    with closing(open_app(args)) as app:
        job = app.cancel(args.id)
    if args.json:
        write_json(_job_json(job))
    else:
        running = job.status is Status.CLAIMED
        write_lines(
            [
                f"job {job.id} is running: cancellation requested (it ends dead, 'cancelled')"
                if running
                else f"job {job.id} cancelled: {job.status.value}"
            ]
        )
    return EXIT_OK


def _bulk_change(args: argparse.Namespace, action: str) -> int:
    """``jobs retry|cancel --kind K [--note TEXT] [--yes]``: every matching job at once.

    Without ``--yes`` nothing changes: the command says how many jobs match,
    so the operator sees the blast radius first.
    """
    status = _BULK_STATUS[action]
    if args.kind is None and args.note is None:
        raise UsageError(f"give a job ID, or --kind/--note to {action} every matching job")
    with closing(open_app(args)) as app:
        matching = app.count_jobs(status=status, kind=args.kind, note=args.note)
        changed = 0
        if args.yes:
            change = app.retry_matching if action == "retry" else app.cancel_matching
            changed = change(kind=args.kind, note=args.note)
    if args.json:
        write_json({"matching": matching, "changed": changed, "applied": args.yes})
    elif args.yes:
        done = "retried" if action == "retry" else "cancelled"
        write_lines([f"{done} {changed} of {matching} matching {status.value} job(s)"])
    else:
        write_lines(
            [f"{matching} {status.value} job(s) match; nothing changed: add --yes to {action} them"]
        )
    return EXIT_OK


# ----------------------------------------------------------------------- add


def _add_jobs_add(actions: Commands) -> None:
    sub = add_command(
        actions,
        "add",
        "enqueue one job of KIND, checked like .delay() (needs --app)",
        _cmd_jobs_add,
    )
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
    add_json_option(sub)


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
        return duration_argument(text)


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
    with closing(open_app(args)) as app:
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
        write_json({"id": ref.id, "merged": ref.merged})
    else:
        write_lines([f"{ref.id} merged" if ref.merged else ref.id])
    return EXIT_OK
