"""``venturi dashboard`` for real: a subprocess serving the user's App on loopback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from support import wait_until

pytestmark = pytest.mark.slow

ACCEPTANCE = Path(__file__).parent.parent / "acceptance"  # holds cli_app.py, the user's App


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def run_dashboard(database_url: str, prefix: str) -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(*options: str, env_token: str | None = None) -> tuple[subprocess.Popen[str], str]:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
        env.update(VENTURI_DATABASE_URL=database_url, CLI_TEST_PREFIX=prefix, PYTHONUNBUFFERED="1")
        if env_token is not None:
            env["VENTURI_DASHBOARD_TOKEN"] = env_token
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "venturi",
                "dashboard",
                "--app",
                "cli_app:app",
                "--port",
                str(port),
                *options,
            ],
            cwd=ACCEPTANCE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        url = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(process.communicate()[1])
            try:  # the static files answer in every mode, signed in or not
                return httpx2.get(f"{url}/static/favicon.svg", timeout=2).status_code == 200
            except httpx2.TransportError:
                return False

        wait_until(answers, timeout=30, every=0.2)
        return process, url

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_read_only_dashboard_serves_the_apps_kinds_and_stops_on_sigterm(run_dashboard) -> None:
    process, url = run_dashboard("--read-only")
    page = httpx2.get(url).text
    assert "cli.double" in page
    assert "read-only" in page
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert f"venturi dashboard on {url}/ (read-only)" in stdout
    assert "Traceback" not in stderr


def test_without_a_token_the_command_prints_a_random_one_that_signs_in(run_dashboard) -> None:
    process, url = run_dashboard()
    assert httpx2.get(url).status_code == 401  # reading needs the sign-in too
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=30)
    printed = r"dashboard token \(sign in with it to read and make changes\): (\S+)"
    token = re.search(printed, stdout)
    assert token is not None, stdout
    assert len(token.group(1)) >= 24
    assert f"venturi dashboard on {url}/ (reading and changes need the token)" in stdout


def test_public_read_opens_reading_and_keeps_changes_behind_the_token(run_dashboard) -> None:
    process, url = run_dashboard("--public-read", "--token", "a-token-of-the-team")
    page = httpx2.get(url)
    assert page.status_code == 200
    assert "cli.double" in page.text
    assert "Sign in to make changes" in page.text
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    assert f"venturi dashboard on {url}/ (changes need the token)" in stdout
    assert stderr == ""


def test_beyond_loopback_with_a_token_it_warns_once_of_plain_http_and_serves(run_dashboard):
    process, url = run_dashboard("--host", "0.0.0.0", env_token="a-token-of-the-team")
    assert httpx2.get(url).status_code == 401
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    (warning,) = stderr.splitlines()
    assert " WARNING venturi.cli: the dashboard on 0.0.0.0 is plain HTTP beyond loopback" in warning
    assert "TLS-terminating proxy" in warning
    assert "venturi dashboard on http://0.0.0.0:" in stdout
    assert "a-token-of-the-team" not in stdout + stderr


def test_beyond_loopback_without_a_token_it_exits_at_once_with_one_line(database_url, prefix):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DATABASE_URL=database_url, CLI_TEST_PREFIX=prefix)
    done = subprocess.run(
        [sys.executable, "-m", "venturi", "dashboard", "--app", "cli_app:app", "--host", "0.0.0.0"],
        cwd=ACCEPTANCE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("venturi: error: refusing to serve the dashboard on 0.0.0.0 ")
    assert "--token T" in line and "$VENTURI_DASHBOARD_TOKEN" in line
