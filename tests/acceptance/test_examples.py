"""Every example in examples/ runs to completion, each on a database of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Web-server examples, run under real servers with HTTP requests in test_web_examples.py.
SERVED = {"fastapi_app.py", "flask_app.py"}
RUN = [
    ("quickstart.py", [], "completed"),
    ("in_web_server.py", ["--self-test"], ""),
    ("periodic.py", ["--once"], ""),
]


def test_every_example_is_run_by_a_test() -> None:
    examples = {path.name for path in EXAMPLES.glob("*.py")}
    assert examples == {script for script, _, _ in RUN} | SERVED


@pytest.mark.parametrize(("script", "args", "expected"), RUN)
def test_example_runs(example_database: str, script: str, args: list[str], expected: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env={**os.environ, "VENTURI_DATABASE_URL": example_database},
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected in result.stdout
