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

    def start(*options: str) -> tuple[subprocess.Popen[str], str]:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
        env.update(VENTURI_DATABASE_URL=database_url, CLI_TEST_PREFIX=prefix, PYTHONUNBUFFERED="1")
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
            try:
                return httpx2.get(url, timeout=2).status_code == 200
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
    process, _ = run_dashboard()
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=30)
    token = re.search(r"dashboard token \(sign in with it to make changes\): (\S+)", stdout)
    assert token is not None, stdout
    assert len(token.group(1)) >= 24
