"""examples/django_project runs: migrations, a worker process, and its demo command."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_project"


@pytest.fixture
def example_env(database_url: str) -> Iterator[dict[str, str]]:
    """The example's environment, on a throwaway database."""
    name = f"venturi_django_example_{secrets.token_hex(4)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["VENTURI_DATABASE_URL"] = make_conninfo(database_url, dbname=name)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        yield env
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_example_project_confirms_orders_through_a_worker(example_env):
    assert conninfo_to_dict(example_env["VENTURI_DATABASE_URL"])["dbname"].startswith("venturi_")
    for command in (["migrate", "-v", "0"], ["venturi", "migrate"]):
        done = manage(example_env, *command)
        assert done.returncode == 0, done.stdout + done.stderr
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "venturi", "worker", "--queues", "default,mail"],
        cwd=PROJECT,
        env=example_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        demo = manage(example_env, "demo", "--timeout", "60")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stdout.splitlines() == [
        "orders in the database: 1",
        "SUCCESSFUL: confirmed order 2 (book) on attempt 1",
    ]
    stats = manage(example_env, "venturi", "stats")
    assert stats.returncode == 0 and "orders.tasks.send_confirmation" in stats.stdout
