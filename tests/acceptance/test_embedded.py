"""With no database URL, venturi starts (or joins) the embedded server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
import venturi
app = venturi.App(set_as_current=False)
app.migrate()
print(app.backend.now().isoformat())
app.close()
"""


@pytest.fixture(autouse=True)
def stop_embedded_server(tmp_path: Path) -> Iterator[None]:
    """The embedded server outlives its clients by design; stop the test's own one."""
    yield
    pid_file = tmp_path / ".venturi" / "pgdata" / "postmaster.pid"
    if pid_file.exists():
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)  # fast shutdown


def run(script: str, directory: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VENTURI_DATABASE_URL"}
    env["VENTURI_EMBEDDED_DIR"] = str(directory / ".venturi")
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_no_url_starts_the_embedded_server_and_says_so_once(tmp_path: Path) -> None:
    result = run(SCRIPT, tmp_path)

    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "embedded PostgreSQL server" in line]
    assert len(said) == 1
    assert said[0].startswith("venturi.postgres.embedded ")
    assert (tmp_path / ".venturi" / "pgdata" / "PG_VERSION").exists()


def test_several_processes_share_one_embedded_server(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            cwd=tmp_path,
            env={
                **{k: v for k, v in os.environ.items() if k != "VENTURI_DATABASE_URL"},
                "VENTURI_EMBEDDED_DIR": str(tmp_path / ".venturi"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outcomes = [p.communicate(timeout=120) for p in procs]

    assert [p.returncode for p in procs] == [0, 0, 0], outcomes
    assert len(list((tmp_path / ".venturi").iterdir())) == 1


def test_without_the_extra_the_error_says_what_to_install_or_set(tmp_path: Path) -> None:
    blocked = "import sys; sys.modules['pgserver'] = None\n" + SCRIPT
    result = run(blocked, tmp_path)

    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "EmbeddedUnavailable" in last
    assert "VENTURI_DATABASE_URL" in last
    assert "pip install 'venturi[embedded]'" in last
