"""Static conformance: mypy (strict) verifies ``_backend_check: type[Backend] = PostgresBackend``.

``mypy venturi`` does not see the tests, so this runs mypy on the contract
suite (its conftest holds the check; the tests' calls are checked against the
protocol too), beside a class that breaks the protocol, which it must flag (so
a check that silently stopped checking would fail here).
"""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "contract"
BROKEN = """\
from venturi.backend import Backend


class HalfBackend:
    def close(self) -> None: ...


_check: type[Backend] = HalfBackend
"""


def test_mypy_verifies_that_the_postgres_adapter_is_a_backend(tmp_path: Path) -> None:
    broken = tmp_path / "half_backend.py"
    broken.write_text(BROKEN)

    stdout, stderr, _ = api.run(
        [
            str(SUITE),
            str(broken),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "--no-pretty",
        ]
    )

    assert stderr == ""
    files = {match.group(1) for match in re.finditer(r"^(\S+?\.py):\d+: error:", stdout, re.M)}
    assert files == {str(broken)}, stdout
    assert "half_backend.py:8: error: Incompatible types in assignment" in stdout
