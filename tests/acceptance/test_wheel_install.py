"""The wheel works outside the checkout (SPEC 6.4, ADR 0140): ``python -m build`` makes an
sdist and a wheel; the wheel, installed (not editable) in a fresh virtual environment in a
temporary directory, reports its version, migrates a new prefix with ``venturi migrate``
and runs a task through ``venturi worker`` against the test server."""

from __future__ import annotations

import importlib.metadata
import secrets
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging_support import Build, Installed, build, clean_env, install
from support import drop_prefix, wait_until

import venturi
from venturi.types import Status

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT = 120

APP_MODULE = """\
import os

import venturi

app = venturi.App(os.environ["VENTURI_DATABASE_URL"], prefix=os.environ["PKG_PREFIX"])


@app.task(kind="pkg.add")
def add(a: int, b: int) -> int:
    return a + b
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build(ROOT, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def installed(built: Build, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return install(built, tmp_path_factory.mktemp("venv") / "env")


@pytest.fixture
def fresh_prefix(database_url: str) -> Iterator[str]:
    value = f"pkg_{secrets.token_hex(5)}"
    yield value
    drop_prefix(database_url, value)


def test_the_build_makes_an_sdist_holding_the_migrations_and_a_wheel(built: Build) -> None:
    version = importlib.metadata.version("venturi")
    assert built.wheel.name == f"venturi-{version}-py3-none-any.whl"
    with tarfile.open(built.sdist) as archive:
        names = {Path(n).relative_to(f"venturi-{version}").as_posix() for n in archive.getnames()}
    assert {f"migrations/{p.name}" for p in (ROOT / "migrations").glob("V*.sql")} <= names
    assert "pyproject.toml" in names


def test_the_installed_wheel_migrates_and_runs_a_task_through_venturi_worker(
    installed: Installed, database_url: str, fresh_prefix: str, tmp_path: Path
) -> None:
    (tmp_path / "pkgapp.py").write_text(APP_MODULE)
    env = clean_env(VENTURI_DATABASE_URL=database_url, PKG_PREFIX=fresh_prefix)

    def run(*command: str) -> str:
        result = subprocess.run(
            command,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    version = importlib.metadata.version("venturi")
    assert run(str(installed.venturi), "--version") == f"venturi {version}\n"
    # The package imported is the installed one, with its package data beside it.
    where = run(
        str(installed.python),
        "-c",
        "import venturi, pathlib; root = pathlib.Path(venturi.__file__).parent; "
        "print(root); print(len(list((root / '_migrations').glob('V*.sql')))); "
        "print(len(list((root / 'dashboard' / 'templates').iterdir())))",
    ).split()
    assert Path(where[0]).is_relative_to(installed.root), where
    assert int(where[1]) == len(list((ROOT / "migrations").glob("V*.sql")))
    assert int(where[2]) > 5

    run(str(installed.venturi), "migrate", "--app", "pkgapp:app")
    assert "schema is up to date" in run(
        str(installed.venturi), "migrate", "--app", "pkgapp:app", "--check"
    )
    job_id = run(str(installed.python), "-c", "from pkgapp import add; print(add.delay(2, 3).id)")
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [str(installed.venturi), "worker", "--app", "pkgapp:app"],
            cwd=tmp_path,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    checker = venturi.App(database_url, prefix=fresh_prefix, set_as_current=False)
    try:
        wait_until(lambda: checker.job(job_id.strip()).job.status.is_terminal, timeout=60)
        assert checker.job(job_id.strip()).job.status is Status.COMPLETED, log.read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        checker.close()
    assert worker.returncode == 0, log.read_text()
    assert "pkg.add" in log.read_text()
