"""The ``venturi`` command line: operate a queue from a shell or a script.

Subcommands: ``migrate``, ``worker``, ``beat``, ``jobs list|show|retry|cancel|add``,
``cleanup``, ``embedded status|stop``, ``stats``, ``dashboard``, ``workers``,
``metrics``, ``workflows show``, ``kinds [list|pause|resume|limits|show]`` and
``schedules list|add|pause|resume|trigger|backfill|remove|show``. Each takes ``--app
module:attribute`` (the user's App; importing its module registers its tasks),
``--database-url`` and ``--prefix`` (which override the App's own settings), before or
after the subcommand name. Without ``--app`` the App is built from the options, then
``$VENTURI_DATABASE_URL`` / ``$VENTURI_PREFIX``, enough for everything but ``worker``,
``beat`` and ``jobs add``.

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

This module assembles the parser and runs it; ``common`` holds what every
command shares, and ``jobs``, ``services``, ``admin`` and ``control`` add their
commands.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable, Sequence

from venturi import logs
from venturi.cli import admin, control, jobs, services
from venturi.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_NOT_RUNNING,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Commands,
    Parser,
    UsageError,
    add_app_options,
    logger,
    report,
)
from venturi.errors import ConfigurationError, VenturiError, describe_exception

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_RUNNING",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

#: The top-level commands, in the order ``venturi --help`` lists them (and an
#: unknown command's error names them): the order they arrived in, not grouped.
_COMMANDS: tuple[Callable[[Commands], None], ...] = (
    admin.add_migrate,
    services.add_worker,
    services.add_beat,
    jobs.add_jobs,
    admin.add_cleanup,
    services.add_embedded,
    admin.add_stats,
    services.add_dashboard,
    admin.add_workers,
    services.add_metrics,
    admin.add_workflows,
    control.add_kinds,
    control.add_schedules,
)

#: The commands that run until stopped: they log at INFO unless told otherwise.
_SERVICES = ("worker", "beat", "metrics")


def _version() -> str:
    try:
        return importlib.metadata.version("venturi")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each leaf sets ``handler`` to the function that runs it."""
    parser = Parser(
        prog=PROG,
        description="venturi: PostgreSQL-backed background jobs.",
        epilog=(
            "durations: 30s, 15m, 12h, 7d, 2w (or sums: 1h30m). "
            "exit status: 0 ok, 1 operational error, 2 usage error."
        ),
    )
    add_app_options(parser, nested=False)
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in _COMMANDS:
        add(commands)
    return parser


def _command_of(args: argparse.Namespace) -> str:
    """``venturi jobs list``: the command ``args`` were parsed for."""
    words = [PROG, args.command, getattr(args, "action", None)]
    return " ".join(word for word in words if word)


def _configure_logging(args: argparse.Namespace) -> None:
    """DEBUG with ``-v``; else INFO for services (or ``--log-level``), WARNING for
    one-shot commands.

    Long-running services show their lifecycle and one line per run end. A
    one-shot command ends in one line that says what failed, so the connection
    pool's retry warnings (one per attempt while the database is unreachable)
    stay out of it.
    """
    is_service = args.command in _SERVICES
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
        report(str(exc), help_of=exc.command or PROG)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version print and "exit"
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    _configure_logging(args)
    try:
        status: int = args.handler(args)
    except UsageError as exc:
        logger.debug("usage error", exc_info=True)
        report(str(exc), help_of=exc.command or _command_of(args))
        return EXIT_USAGE
    except ConfigurationError as exc:
        logger.debug("configuration error", exc_info=True)
        report(str(exc), help_of=_command_of(args))
        return EXIT_USAGE
    except VenturiError as exc:
        logger.debug("operation failed", exc_info=True)
        report(str(exc))
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
        report(f"unexpected {describe_exception(exc)} (run with -v for the traceback)")
        return EXIT_FAILURE
    return status
