"""Typed tasks: mypy checks ``.delay()`` and ``.adelay()`` calls against the handler
(ctx excluded)."""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "typing" / "delay_calls.py"


def test_mypy_accepts_fitting_delay_calls_and_flags_the_others(tmp_path: Path) -> None:
    stdout, stderr, _ = api.run(
        [
            str(SAMPLE),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "--no-pretty",
        ]
    )
    assert stderr == ""
    flagged = {
        int(match.group(1)) for match in re.finditer(r"delay_calls\.py:(\d+): error:", stdout, re.M)
    }
    lines = SAMPLE.read_text().splitlines()
    rejected = {n for n, line in enumerate(lines, start=1) if line.endswith("# rejected")}
    assert len(rejected) == 14
    assert flagged == rejected, stdout
