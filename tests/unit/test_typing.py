"""Typed tasks and integrations: mypy checks ``.delay()`` and ``.adelay()`` calls against
the handler (ctx excluded), a ref's result against its return annotation, and the
README's in-server worker lines as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tests" / "typing"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sample", "rejections"), [("delay_calls.py", 14), ("web_lifespans.py", 1)]
)
def test_mypy_accepts_the_fitting_lines_and_flags_the_others(
    tmp_path: Path, sample: str, rejections: int
) -> None:
    path = SAMPLES / sample
    stdout, stderr, _ = api.run(
        [
            str(path),
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
        int(match.group(1))
        for match in re.finditer(rf"{re.escape(sample)}:(\d+): error:", stdout, re.M)
    }
    lines = path.read_text().splitlines()
    rejected = {n for n, line in enumerate(lines, start=1) if line.endswith("# rejected")}
    assert len(rejected) == rejections
    assert flagged == rejected, stdout
