"""The queue-wide commands: ``migrate``, ``cleanup``, ``stats``, ``workers``, ``workflows``.

Each ``add_*`` function adds one top-level command to the tree and points it
at its handler; ``venturi.cli`` calls them in the order ``venturi --help``
lists the commands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import closing
from datetime import timedelta
from typing import Any

from venturi.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    Commands,
    UsageError,
    add_command,
    add_json_option,
    add_read_url_option,
    duration_argument,
    format_age,
    format_table,
    format_time,
    one_line,
    open_app,
    positive_int_argument,
    utc,
    warn,
    write_json,
    write_lines,
)
from venturi.serialization import is_storable_text
from venturi.types import AppliedMigration, Stats, Status, WorkerInfo, Workflow

__all__ = ["add_cleanup", "add_migrate", "add_stats", "add_workers", "add_workflows"]


# ------------------------------------------------------------------- migrate


def add_migrate(commands: Commands) -> None:
    migrate = add_command(commands, "migrate", "apply pending schema migrations", _cmd_migrate)
    review = migrate.add_mutually_exclusive_group()
    review.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL migrate would run for the pending migrations; apply nothing",
    )
    review.add_argument(
        "--check",
        action="store_true",
        help="apply nothing; exit status 1 while migrations are pending, 0 when current",
    )
    add_json_option(migrate)


def _cmd_migrate(args: argparse.Namespace) -> int:
    """``venturi migrate``; ``--sql`` and ``--check`` only read the history (ADR 0136)."""
    if args.sql and args.json:
        raise UsageError("--sql prints SQL: it takes no --json")
    with closing(open_app(args)) as app:
        if args.sql or args.check:
            pending, script = app.pending_migrations()
        else:
            applied = app.migrate()
    if args.sql:
        sys.stdout.write(script)
        return EXIT_OK
    if args.check:
        return _report_pending(pending, as_json=args.json)
    if args.json:
        write_json({"applied": [{"version": m.version, "name": m.name} for m in applied]})
    elif applied:
        write_lines(f"applied V{m.version}__{m.name}" for m in applied)
    else:
        write_lines(["schema is up to date"])
    return EXIT_OK


def _report_pending(pending: Sequence[AppliedMigration], *, as_json: bool) -> int:
    if as_json:
        write_json({"pending": [{"version": m.version, "name": m.name} for m in pending]})
    elif pending:
        names = ", ".join(f"V{m.version}__{m.name}" for m in pending)
        noun = "migration" if len(pending) == 1 else "migrations"
        write_lines([f"{len(pending)} pending {noun}: {names}"])
    else:
        write_lines(["schema is up to date"])
    return EXIT_FAILURE if pending else EXIT_OK


# ------------------------------------------------------------------- cleanup


def add_cleanup(commands: Commands) -> None:
    cleanup = add_command(commands, "cleanup", "delete old completed/dead jobs", _cmd_cleanup)
    cleanup.add_argument(
        "--older-than",
        type=duration_argument,
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
        type=positive_int_argument,
        default=1000,
        metavar="N",
        help="rows deleted per transaction (default: 1000)",
    )
    add_json_option(cleanup)


def _cmd_cleanup(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        deleted = app.cleanup(
            older_than=args.older_than, status=args.status, batch_size=args.batch_size
        )
    if args.json:
        write_json({"deleted": deleted})
    else:
        noun = "job" if deleted == 1 else "jobs"
        what = f"{args.status} {noun}" if args.status else f"finished {noun}"
        write_lines([f"deleted {deleted} {what} older than {format_age(args.older_than)}"])
    return EXIT_OK


# --------------------------------------------------------------------- stats


def add_stats(commands: Commands) -> None:
    stats = add_command(commands, "stats", "job counts per kind and status", _cmd_stats)
    stats.add_argument(
        "--backlog",
        action="store_true",
        help="print one integer, the due pending jobs (for autoscalers such as KEDA)",
    )
    stats.add_argument("--kind", metavar="KIND", help="with --backlog: only this kind's jobs")
    add_read_url_option(stats)
    add_json_option(stats)


def _cmd_stats(args: argparse.Namespace) -> int:
    if args.kind is not None and not args.backlog:
        raise UsageError("--kind needs --backlog")
    if args.kind is not None and not is_storable_text(args.kind):
        raise UsageError(f"--kind {args.kind!r} is not text PostgreSQL can hold")
    if args.backlog:
        if args.json:
            raise UsageError("--backlog prints one integer: it takes no --json")
        with closing(open_app(args)) as app:
            write_lines([str(app.backlog(args.kind))])
        return EXIT_OK
    with closing(open_app(args)) as app:
        stats = app.stats()
        unserved = app.unserved_kinds()
    if args.json:
        write_json({**_stats_json(stats), "unserved_kinds": unserved})
    elif not stats.kinds:
        write_lines(["no jobs"])
    else:
        write_lines(_stats_lines(stats))
    if unserved:
        warn(f"no live worker serves these kinds, whose due jobs wait: {', '.join(unserved)}")
    return EXIT_OK


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


# ------------------------------------------------------------------- workers


def add_workers(commands: Commands) -> None:
    """``venturi workers``: the live entries of the worker registry (ADR 0119)."""
    workers = add_command(commands, "workers", "the live workers of the prefix", _cmd_workers)
    add_json_option(workers)


def _cmd_workers(args: argparse.Namespace) -> int:
    with closing(open_app(args)) as app:
        workers = app.workers()
    if args.json:
        write_json({"workers": [_worker_json(worker) for worker in workers]})
    elif not workers:
        write_lines(["no live workers"])
    else:
        write_lines(_worker_lines(workers))
    return EXIT_OK


def _worker_lines(workers: Sequence[WorkerInfo]) -> list[str]:
    header = ("ID", "VERSION", "CONCURRENCY", "RUNNING", "STARTED", "HEARTBEAT", "KINDS")
    rows = [
        (
            worker.id,
            worker.version,
            str(worker.concurrency),
            str(worker.running),
            format_time(worker.started_at),
            format_time(worker.heartbeat_at, precise=True),
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
        "started_at": utc(worker.started_at),
        "heartbeat_at": utc(worker.heartbeat_at),
        "expires_at": utc(worker.expires_at),
    }


# ----------------------------------------------------------------- workflows


def add_workflows(commands: Commands) -> None:
    flows = add_command(commands, "workflows", "inspect workflows (chains, chords)", None)
    flow_actions = flows.add_subparsers(dest="action", metavar="ACTION", required=True)
    flow_show = add_command(
        flow_actions, "show", "every step of a workflow", _cmd_workflows_show
    )
    flow_show.add_argument("id", metavar="ID", help="the workflow id (ref.id of its delay())")
    add_json_option(flow_show)


def _cmd_workflows_show(args: argparse.Namespace) -> int:
    """``venturi workflows show ID``: the steps in position order (ADR 0125)."""
    with closing(open_app(args)) as app:
        workflow = app.workflow(args.id)
    if args.json:
        write_json(_workflow_json(workflow))
    else:
        write_lines(_workflow_lines(workflow))
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
            format_time(step.finished_at),
            one_line(step.note) if step.note is not None else "-",
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
                "finished_at": utc(step.finished_at),
            }
            for step in workflow.steps
        ],
    }
