"""Helpers of the tests that run the ``venturi`` console script in subprocesses."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
# A hang guard for each command, not a speed assertion: a CLI that cannot
# reach its database must give up on its own, well within this.
COMMAND_TIMEOUT = 60

Run = Callable[..., subprocess.CompletedProcess[str]]


def cli_env(database_url: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DATABASE_URL=database_url, CLI_TEST_PREFIX=prefix, PYTHONUNBUFFERED="1")
    return env


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    return orjson.loads(succeeded(result))


def failed_with(result: subprocess.CompletedProcess[str], status: int) -> str:
    """The single error line of a failed command."""
    assert result.returncode == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("venturi: error: ")
    return lines[0]
