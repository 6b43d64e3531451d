"""What every command shares: exit codes, argument types, app loading and output.

One place for the CLI's conventions, so the command modules agree on them: a
usage error is a ``UsageError`` (exit 2, one line naming the ``--help`` to
read), results go to stdout as aligned tables or one ``--json`` document, and
warnings and errors are one ``venturi: ...`` line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import orjson

from venturi import logs
from venturi.errors import ConfigurationError, describe_exception

if TYPE_CHECKING:
    from venturi.app import App

__all__ = [
    "DEFAULT_PREFIX",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_RUNNING",
    "EXIT_OK",
    "EXIT_USAGE",
    "PREFIX_ENV",
    "PROG",
    "Commands",
    "Handler",
    "Parser",
    "UsageError",
    "add_app_options",
    "add_command",
    "add_json_option",
    "add_log_options",
    "add_read_url_option",
    "compact_json",
    "duration_argument",
    "format_age",
    "format_table",
    "format_time",
    "load_app",
    "logger",
    "one_line",
    "open_app",
    "parse_duration",
    "port_argument",
    "positive_int_argument",
    "report",
    "seconds_argument",
    "utc",
    "warn",
    "write_json",
    "write_lines",
]

#: The whole CLI logs as ``venturi.cli``, whichever module of the package speaks.
logger = logging.getLogger("venturi.cli")

PROG = "venturi"
PREFIX_ENV = "VENTURI_PREFIX"
DEFAULT_PREFIX = "venturi"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3
"""``venturi embedded status`` when no server runs, as ``systemctl status`` does."""
EXIT_INTERRUPTED = 130

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_DURATION_HINT = "use a number and a unit s, m, h, d or w, e.g. 30s, 15m, 12h, 7d, 2w or 1h30m"


class UsageError(Exception):
    """Bad command-line input; reported as one line with exit status 2.

    ``command`` is the command whose ``--help`` the line points to (``venturi
    jobs list``); ``None`` leaves it to ``main``, which knows the command parsed.
    """

    def __init__(self, message: str, *, command: str | None = None) -> None:
        super().__init__(message)
        self.command = command


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, raised rather than printed.

    argparse's own ``error`` prints the usage block and exits; the CLI promises
    a single ``venturi: error:`` line, so errors travel up to ``main``.
    """

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{where}: {message}" if where else message, command=self.prog)


#: What a command group adds its subcommands to (``add_subparsers``' result).
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"
#: The function a leaf command runs: parsed arguments in, exit status out.
Handler: TypeAlias = Callable[[argparse.Namespace], int]


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


def duration_argument(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds_argument(text: str) -> float:
    """Seconds as a plain number (``30``, ``2.5``) or as a duration (``1m``)."""
    try:
        seconds = float(text)
    except ValueError:
        return duration_argument(text).total_seconds()
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid seconds {text!r}: must be a finite number >= 0")
    return seconds


def positive_int_argument(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a positive integer")
    return value


def port_argument(text: str) -> int:
    port = positive_int_argument(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: must be 1-65535")
    return port


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


def open_app(args: argparse.Namespace) -> App:
    """The App a subcommand works on: ``--app`` with overrides, or one built from options/env."""
    from venturi.app import App

    database_url: str | None = getattr(args, "database_url", None)
    prefix: str | None = getattr(args, "prefix", None)
    spec: str | None = getattr(args, "app", None)
    pooler: dict[str, Any] = {
        "direct_url": getattr(args, "direct_url", None),
        "transaction_pooling": getattr(args, "transaction_pooling", None) or None,
        "read_url": getattr(args, "read_url", None),
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
    read_url: str | None = None,
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
            read_url=read_url,
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


# ------------------------------------------------------------------- options


def add_command(commands: Commands, name: str, help_text: str, handler: Handler | None) -> Parser:
    """A subcommand that takes the app options; ``handler`` runs it (``None``: it has actions)."""
    sub = commands.add_parser(name, help=help_text, description=help_text)
    add_app_options(sub, nested=True)
    if handler is not None:
        sub.set_defaults(handler=handler)
    return sub


def add_app_options(parser: argparse.ArgumentParser, *, nested: bool) -> None:
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


def add_log_options(parser: argparse.ArgumentParser) -> None:
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


def add_read_url_option(parser: argparse.ArgumentParser) -> None:
    """``--read-url``, for the commands that only read jobs and stats (ADR 0140)."""
    parser.add_argument(
        "--read-url",
        metavar="URL",
        help="a read replica to read jobs and stats from (changes still go to the primary); "
        "default: the App's own, else $VENTURI_READ_DATABASE_URL",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of a table"
    )


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


def format_time(value: datetime | None, *, precise: bool = False) -> str:
    if value is None:
        return "-"
    utc = value.astimezone(UTC)
    if precise:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(text: str) -> str:
    return " ".join(text.split())


def compact_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def utc(value: datetime | None) -> datetime | None:
    return value.astimezone(UTC) if value is not None else None


def write_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode())
    sys.stdout.write("\n")


def write_lines(lines: Iterable[str]) -> None:
    for line in lines:
        sys.stdout.write(line + "\n")


def warn(message: str) -> None:
    """A warning about the queue on stderr: stdout stays the report, as before."""
    sys.stderr.write(f"{PROG}: warning: {one_line(message)}\n")


def report(message: str, *, help_of: str | None = None) -> None:
    """The one error line; a usage error's ends by naming the ``--help`` to read."""
    hint = f" (see {help_of} --help)" if help_of is not None else ""
    sys.stderr.write(f"{PROG}: error: {one_line(message)}{hint}\n")
