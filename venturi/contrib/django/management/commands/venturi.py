"""``manage.py venturi COMMAND ...``: the ``venturi`` CLI on the project's App.

Every subcommand and option is the CLI's own (``venturi.cli``), run with
``--app venturi.contrib.django.state:command_app``: an App of
``settings.VENTURI``, every installed app's tasks imported at startup. One
option is added for ``worker``: ``--queues a,b`` serves those Django queues
(their kinds, ``kinds.py``), with any ``--kinds`` given beside it; without
either a worker serves every Django queue and every plain venturi task.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from venturi.cli import main
from venturi.contrib.django import kinds

__all__ = [
    "APP_SPEC",
    "Command",
    "cli_argv",
]

APP_SPEC = "venturi.contrib.django.state:command_app"


def _queues(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("--queues needs at least one queue name")
    return names


def cli_argv(argv: list[str]) -> list[str]:
    """``argv`` for ``venturi.cli.main``: the project's App, ``--queues`` as ``--kinds``."""
    if argv[:1] != ["worker"]:
        return ["--app", APP_SPEC, *argv]
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--queues", type=_queues, default=None)
    extra.add_argument("--kinds", default=None)
    known, rest = extra.parse_known_args(argv[1:])
    if known.queues is None:
        if known.kinds is not None:
            rest = ["--kinds", known.kinds, *rest]
        return ["--app", APP_SPEC, "worker", *rest]
    served = kinds.kinds_of_queues(known.queues)
    if known.kinds is not None:
        served += [k for k in known.kinds.split(",") if k]
    return ["--app", APP_SPEC, "worker", "--kinds", ",".join(served), *rest]


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "venturi's command line on this project's queue: worker [--queues Q,...], beat, "
        "migrate, jobs, stats, workers, cleanup, dashboard, ... (manage.py venturi --help)"
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("argv", nargs=argparse.REMAINDER, help="a venturi CLI command")

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand the whole command line to the CLI: its options, Django's none.

        ``manage.py`` has already read ``--settings`` and ``--pythonpath``.
        """
        sys.exit(self.run(argv[2:]))

    def handle(self, *args: Any, **options: Any) -> None:
        status = self.run(list(options["argv"]))
        if status:
            raise CommandError(f"venturi exited with status {status}", returncode=status)

    def run(self, argv: list[str]) -> int:
        return main(cli_argv(argv))
