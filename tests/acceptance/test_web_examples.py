"""The web examples under real servers: uvicorn (FastAPI) and ``flask run`` (werkzeug).

Each server runs in a subprocess on a free loopback port with its database of its
own. An HTTP request enqueues inside the request's transaction and the worker
inside the server completes the job; then SIGTERM stops the server cleanly, and a
job still running at the end of the grace is released (its journal says so).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from support import wait_until

ROOT = Path(__file__).resolve().parents[2]
#: The examples' GRACE plus room for the server's own shutdown.
EXIT_TIMEOUT = 30.0

pytestmark = pytest.mark.slow

SERVERS = {
    "uvicorn": lambda port: [
        sys.executable,
        "-m",
        "uvicorn",
        "examples.fastapi_app:api",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ],
    "flask": lambda port: [
        sys.executable,
        "-m",
        "flask",
        "--app",
        "examples.flask_app",
        "run",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ],
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


#: How each server ends after a graceful SIGTERM shutdown: uvicorn (since 0.29) re-raises
#: the signal once its lifespan shutdown has completed; our Flask SIGTERM handler exits 0.
CLEAN_EXIT = {"uvicorn": (-signal.SIGTERM, "Application shutdown complete."), "flask": (0, "")}


@dataclass
class Server:
    name: str
    process: subprocess.Popen[str]
    client: httpx.Client
    database_url: str

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/jobs/{job_id}")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    def scalar(self, sql: str, params: Any) -> Any:
        with psycopg.connect(self.database_url) as conn:
            row = conn.execute(sql, params).fetchone()
        return row[0] if row else None


def is_up(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(params=sorted(SERVERS))
def server(request: pytest.FixtureRequest, example_database: str) -> Iterator[Server]:
    port = free_port()
    process = subprocess.Popen(
        SERVERS[request.param](port),
        cwd=ROOT,
        env={**os.environ, "VENTURI_DATABASE_URL": example_database, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        wait_until(lambda: is_up(client) or process.poll() is not None, timeout=60)
        assert process.poll() is None, process.communicate()[0]
        yield Server(request.param, process, client, example_database)
    finally:
        client.close()
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_a_request_enqueues_in_its_transaction_and_the_worker_in_the_server_runs_it(
    server: Server,
) -> None:
    response = server.client.post("/orders", params={"item": "book"})
    assert response.status_code == 201, response.text
    created = response.json()

    wait_until(lambda: server.job(created["job_id"])["status"] == "completed", timeout=20)
    assert server.job(created["job_id"])["journal"] == ["completed"]
    confirmed = server.scalar(
        "SELECT confirmed_at IS NOT NULL FROM example_orders WHERE id = %s",
        (created["order_id"],),
    )
    assert confirmed is True


def test_sigterm_stops_the_server_cleanly_and_releases_the_job_still_running(
    server: Server,
) -> None:
    response = server.client.post("/naps", params={"seconds": 120})
    assert response.status_code == 201, response.text
    job_id = response.json()["job_id"]
    wait_until(lambda: server.job(job_id)["status"] == "claimed", timeout=20)

    server.process.send_signal(signal.SIGTERM)
    output, _ = server.process.communicate(timeout=EXIT_TIMEOUT)

    returncode, said = CLEAN_EXIT[server.name]
    assert server.process.returncode == returncode, output
    assert said in output
    assert "Traceback" not in output, output
    # The worker's lifecycle at INFO, as `venturi worker` logs it, with no logging set up.
    worker_lines = [line for line in output.splitlines() if " INFO venturi.worker: " in line]
    for expected in ("started: concurrency", "released 1 unfinished job(s)", "stopped"):
        assert any(expected in line for line in worker_lines), output
    journal = server.scalar(
        "SELECT array_agg(outcome ORDER BY id) FROM venturi_journal WHERE job_id = %s", (job_id,)
    )
    assert journal == ["released"], output
    status, failures = (
        server.scalar("SELECT status FROM venturi_jobs WHERE id = %s", (job_id,)),
        server.scalar("SELECT failure_count FROM venturi_jobs WHERE id = %s", (job_id,)),
    )
    assert (status, failures) == ("pending", 0)
