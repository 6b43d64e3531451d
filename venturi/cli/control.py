"""``venturi kinds ...`` and ``venturi schedules ...``: control at run time (ADR 0139).

``kinds`` (or ``kinds list``) lists every kind of the prefix with its state,
counts and limits; ``kinds pause|resume KIND``, ``kinds limits KIND
--global-concurrency N --rate-limit 10/s --key-concurrency N`` (``none`` clears an
override) change it; ``kinds show KIND`` adds its audit trail. ``schedules
list|add|pause|resume|trigger|backfill|remove|show`` do the same for schedules.
Every change takes ``--as NAME``, the name its audit entry gives (default
``host:pid``).
"""

from __future__ import annotations

import argparse
import json
from contextlib import closing
from datetime import datetime
from typing import Any

from venturi.cli.common import (
    EXIT_OK,
    Commands,
    UsageError,
    add_command,
    add_json_option,
    compact_json,
    format_table,
    format_time,
    open_app,
    utc,
    write_json,
    write_lines,
)
from venturi.controls import LIMIT_NAMES, UNSET, AuditEntry, KindInfo, Limits, ScheduleInfo
from venturi.errors import InvalidArgument
from venturi.types import Status

__all__ = ["add_kinds", "add_schedules"]

#: Audit entries ``show`` prints.
_AUDIT_SHOWN = 20


def _add_actor(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--as",
        dest="actor",
        metavar="NAME",
        help="who the audit trail names for this change (default: host:pid)",
    )


# --------------------------------------------------------------------- kinds


def add_kinds(commands: Commands) -> None:
    kinds = add_command(
        commands, "kinds", "list kinds, pause or resume them, override their limits", _cmd_list
    )
    add_json_option(kinds)
    actions = kinds.add_subparsers(dest="action", metavar="ACTION")
    listing = add_command(actions, "list", "every kind: state, counts, limits", _cmd_list)
    add_json_option(listing)
    for name, help_text, handler in (
        ("pause", "stop every worker claiming the kind (running jobs finish)", _cmd_pause),
        ("resume", "let workers claim the kind again", _cmd_resume),
    ):
        sub = add_command(actions, name, help_text, handler)
        sub.add_argument("kind", metavar="KIND")
        _add_actor(sub)
        add_json_option(sub)
    limits = add_command(
        actions, "limits", "override the kind's limits across workers ('none' clears)", _cmd_limits
    )
    limits.add_argument("kind", metavar="KIND")
    for name in LIMIT_NAMES:
        limits.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_rate_argument if name == "rate_limit" else _count_argument,
            default=UNSET,
            metavar="10/s" if name == "rate_limit" else "N",
            help=f"override {name} ('none' clears the override)",
        )
    _add_actor(limits)
    add_json_option(limits)
    show = add_command(actions, "show", "one kind and its audit trail", _cmd_show)
    show.add_argument("kind", metavar="KIND")
    add_json_option(show)


def _count_argument(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: an integer, or none") from None


def _rate_argument(text: str) -> str | None:
    return None if text.strip().lower() == "none" else text


def _cmd_list(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        kinds = app.kinds()
    if args.json:
        write_json([_kind_json(info) for info in kinds])
        return EXIT_OK
    if not kinds:
        write_lines(["no kinds"])
        return EXIT_OK
    header = ("KIND", "STATE", "PENDING", "CLAIMED", "COMPLETED", "DEAD", "LIMITS")
    rows = [
        (
            info.kind,
            info.state.value,
            *(str(info.counts[status]) for status in Status),
            _limits_text(info),
        )
        for info in kinds
    ]
    write_lines(format_table(header, rows, right={2, 3, 4, 5}))
    return EXIT_OK


def _cmd_pause(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        app.pause_kind(args.kind, actor=args.actor)
        info = app.kind(args.kind)
    return _changed(args, info, f"kind {info.kind} paused: no worker claims it until resumed")


def _cmd_resume(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        app.resume_kind(args.kind, actor=args.actor)
        info = app.kind(args.kind)
    return _changed(args, info, f"kind {info.kind} resumed")


def _cmd_limits(args: argparse.Namespace) -> int:
    given = {name: getattr(args, name) for name in LIMIT_NAMES}
    if all(value is UNSET for value in given.values()):
        raise UsageError(
            "kinds limits: give at least one of --global-concurrency, --rate-limit, "
            "--key-concurrency ('none' clears an override)"
        )
    with closing(open_app(args)) as app:
        try:
            app.set_limits(args.kind, actor=args.actor, **given)
        except InvalidArgument as exc:
            raise UsageError(str(exc)) from exc
        info = app.kind(args.kind)
    return _changed(args, info, f"kind {info.kind}: limits in force {_limits_text(info)}")


def _cmd_show(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        info = app.kind(args.kind)
        audit = app.kind_audit(info.kind, limit=_AUDIT_SHOWN)
    if args.json:
        write_json({**_kind_json(info), "audit": [_audit_json(entry) for entry in audit]})
        return EXIT_OK
    counts = ", ".join(f"{status.value} {info.counts[status]}" for status in Status)
    lines = [
        f"kind        {info.kind}{'' if info.registered else ' (not registered by this App)'}",
        f"state       {info.state.value}",
        f"jobs        {counts}",
        f"declared    {_limits_line(info.declared)}",
        f"overrides   {_limits_line(info.overrides)}",
        f"in force    {_limits_line(info.limits)}",
        "",
        *_audit_lines(audit),
    ]
    write_lines(lines)
    return EXIT_OK


def _changed(args: argparse.Namespace, info: KindInfo, line: str) -> int:
    if args.json:
        write_json(_kind_json(info))
    else:
        write_lines([line])
    return EXIT_OK


def _limits_text(info: KindInfo) -> str:
    """The limits in force, an override marked with ``*``; ``-`` for none."""
    parts = []
    for name, value in info.limits.as_dict().items():
        if value is not None:
            mark = "*" if getattr(info.overrides, name) is not None else ""
            parts.append(f"{name}={value}{mark}")
    return " ".join(parts) or "-"


def _limits_line(limits: Limits) -> str:
    return " ".join(f"{k}={'-' if v is None else v}" for k, v in limits.as_dict().items())


def _kind_json(info: KindInfo) -> dict[str, Any]:
    return {
        "kind": info.kind,
        "state": info.state.value,
        "registered": info.registered,
        "counts": {status.value: count for status, count in info.counts.items()},
        "declared": info.declared.as_dict(),
        "overrides": info.overrides.as_dict(),
        "limits": info.limits.as_dict(),
        "updated_at": utc(info.updated_at),
    }


def _audit_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at": utc(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "details": dict(entry.details),
    }


def _audit_lines(audit: list[AuditEntry]) -> list[str]:
    if not audit:
        return ["no changes recorded"]
    header = ("AT", "BY", "ACTION", "DETAILS")
    rows = [
        (
            format_time(entry.at, precise=True),
            entry.actor,
            entry.action,
            compact_json(dict(entry.details)) if entry.details else "-",
        )
        for entry in audit
    ]
    return format_table(header, rows)


# ----------------------------------------------------------------- schedules


def add_schedules(commands: Commands) -> None:
    schedules = add_command(
        commands, "schedules", "list schedules; add, pause, trigger stored ones", None
    )
    actions = schedules.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = add_command(actions, "list", "every schedule, code and stored", _cmd_sched_list)
    add_json_option(listing)
    add = add_command(actions, "add", "store a schedule (a running beat picks it up)", _cmd_add)
    add.add_argument("name", metavar="NAME")
    add.add_argument("cron", metavar="CRON", help="e.g. '0 3 * * *' (quote it)")
    add.add_argument("task", metavar="TASK", help="the kind of a task of --app")
    add.add_argument("--kwargs", type=_kwargs_argument, default=None, metavar="JSON")
    add.add_argument("--timezone", default="UTC", metavar="TZ", help="IANA name (default UTC)")
    _add_actor(add)
    add_json_option(add)
    for name, help_text in (
        ("pause", "stop enqueuing a stored schedule's ticks"),
        ("resume", "enqueue a paused stored schedule's ticks again"),
        ("remove", "delete a stored schedule"),
        ("trigger", "enqueue one run of a schedule now"),
    ):
        sub = add_command(actions, name, help_text, _cmd_sched_change)
        sub.add_argument("name", metavar="NAME")
        _add_actor(sub)
        add_json_option(sub)
    backfill = add_command(
        actions, "backfill", "one run per tick of a past window, once", _cmd_backfill
    )
    backfill.add_argument("name", metavar="NAME")
    backfill.add_argument("--start", type=_time_argument, required=True, metavar="TIME")
    backfill.add_argument("--end", type=_time_argument, required=True, metavar="TIME")
    _add_actor(backfill)
    add_json_option(backfill)
    show = add_command(actions, "show", "one schedule and its audit trail", _cmd_sched_show)
    show.add_argument("name", metavar="NAME")
    add_json_option(show)


def _kwargs_argument(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON {text!r}: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of keyword arguments")
    return value


def _time_argument(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use ISO 8601 with a time zone, e.g. 2030-01-01T09:00:00Z"
        )
    return moment


def _cmd_sched_list(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        schedules = app.list_schedules()
    if args.json:
        write_json([_schedule_json(info) for info in schedules])
        return EXIT_OK
    if not schedules:
        write_lines(["no schedules"])
        return EXIT_OK
    header = ("NAME", "SOURCE", "STATE", "CRON", "TZ", "TASK", "NEXT TICK")
    rows = [
        (
            info.name,
            info.source,
            info.state.value,
            info.cron,
            info.timezone,
            info.kind,
            format_time(info.next_tick),
        )
        for info in schedules
    ]
    write_lines(format_table(header, rows))
    return EXIT_OK


def _cmd_add(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        app.add_schedule(
            args.name, args.cron, args.task, args.kwargs, args.timezone, actor=args.actor
        )
        info = app.schedule_info(args.name)
    if args.json:
        write_json(_schedule_json(info))
    else:
        write_lines([f"schedule {info.name} added: next tick {format_time(info.next_tick)}"])
    return EXIT_OK


def _cmd_sched_change(args: argparse.Namespace) -> int:
    """pause, resume, remove, trigger."""
    with closing(open_app(args)) as app:
        if args.action == "trigger":
            ref = app.trigger_schedule(args.name, actor=args.actor)
            document: dict[str, Any] = {"name": args.name, "job_id": ref.id}
            line = f"schedule {args.name} triggered: job {ref.id}"
        elif args.action == "remove":
            app.remove_schedule(args.name, actor=args.actor)
            document = {"name": args.name, "removed": True}
            line = f"schedule {args.name} removed"
        else:
            change = app.pause_schedule if args.action == "pause" else app.resume_schedule
            change(args.name, actor=args.actor)
            document = _schedule_json(app.schedule_info(args.name))
            line = f"schedule {args.name} {args.action}d"
    if args.json:
        write_json(document)
    else:
        write_lines([line])
    return EXIT_OK


def _cmd_backfill(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        try:
            refs = app.backfill_schedule(args.name, args.start, args.end, actor=args.actor)
        except InvalidArgument as exc:
            raise UsageError(str(exc)) from exc
    if args.json:
        write_json({"name": args.name, "job_ids": [ref.id for ref in refs]})
    else:
        write_lines([f"schedule {args.name}: {len(refs)} run(s) enqueued"])
    return EXIT_OK


def _cmd_sched_show(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        info = app.schedule_info(args.name)
        audit = app.schedule_audit(args.name, limit=_AUDIT_SHOWN)
    if args.json:
        write_json({**_schedule_json(info), "audit": [_audit_json(entry) for entry in audit]})
        return EXIT_OK
    lines = [
        f"schedule    {info.name} ({info.source})",
        f"state       {info.state.value}",
        f"cron        {info.cron} in {info.timezone}",
        f"task        {info.kind} {compact_json(dict(info.kwargs))}",
        f"next tick   {format_time(info.next_tick)}",
        "",
        *_audit_lines(audit),
    ]
    write_lines(lines)
    return EXIT_OK


def _schedule_json(info: ScheduleInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "source": info.source,
        "state": info.state.value,
        "cron": info.cron,
        "timezone": info.timezone,
        "task": info.kind,
        "kwargs": dict(info.kwargs),
        "next_tick": utc(info.next_tick),
        "created_at": utc(info.created_at),
        "updated_at": utc(info.updated_at),
    }
