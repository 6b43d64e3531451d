"""``--health-port`` of ``venturi worker`` and ``venturi beat``: real HTTP against real processes.

- ``GET /healthz`` is 200 while the process's loops run, naming them; ``GET
  /readyz`` is 200 while the database answers and the schema is current.
- The database going away (a ``TcpProxy`` in front of it, stopped) turns
  ``/readyz`` into 503 with a one-line reason naming the address, while
  ``/healthz`` stays 200: the loops wait the outage out, so a liveness probe must
  not restart the pod. It comes back to 200 when the database does.
- A health port in use fails the command at start, with one line.
- Below the server, the checks themselves: a stuck loop and a loop whose thread
  ended are named by ``liveness``; an unmigrated prefix is named by ``readiness``.

Every wait has a hang guard, not a speed assertion (ADR 0136).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_support import COMMAND_TIMEOUT, HERE, Run, cli_env, failed_with
from support import TcpProxy, wait_until

import venturi
from venturi.health import liveness, readiness
from venturi.runtime.service import ServiceThread

WORKER = ("--app", "cli_app:app", "worker", "--concurrency", "2", "--grace", "5")
BEAT = ("--app", "cli_app:app", "beat")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get(port: int, path: str) -> tuple[int, str]:
    """Status and body of ``GET path``; no exception for a 503."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""  # not listening yet


@contextmanager
def serving(
    command: tuple[str, ...], url: str, prefix: str, port: int, log: Path
) -> Iterator[None]:
    """The command running with its health checks on ``port``; stopped by SIGTERM, exit 0."""
    with log.open("w") as output:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "venturi", *command,
                "--health-port", str(port), "--health-host", "127.0.0.1",
            ],
            cwd=HERE,
            env=cli_env(url, prefix),
            stdout=subprocess.DEVNULL,
            stderr=output,
            text=True,
        )  # fmt: skip
    try:
        yield
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=COMMAND_TIMEOUT) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    instance = TcpProxy.in_front_of(database_url)
    yield instance
    instance.stop()


def test_a_stopped_database_makes_the_worker_unready_but_still_alive(
    database_url: str, prefix: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    port = free_port()
    with serving(WORKER, proxy.url(database_url), prefix, port, tmp_path / "worker.log"):
        check_outage(port, proxy)


def check_outage(port: int, proxy: TcpProxy) -> None:
    def loops_run() -> bool:
        status, body = get(port, "/healthz")
        return status == 200 and "venturi-worker" in body and "claim" in body

    wait_until(loops_run, timeout=COMMAND_TIMEOUT)
    status, body = get(port, "/readyz")
    assert (status, body.startswith("ok: database 127.0.0.1:")) == (200, True), body

    proxy.stop()
    status, body = wait_until(
        lambda: (answer := get(port, "/readyz"))[0] == 503 and answer, timeout=COMMAND_TIMEOUT
    )
    assert body.count("\n") == 1 and body.startswith("unavailable: "), body
    assert f"127.0.0.1:{proxy.port}" in body, body
    assert get(port, "/healthz")[0] == 200  # the loops back off; nothing to restart

    proxy.start()
    wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=COMMAND_TIMEOUT)
    assert get(port, "/healthz")[0] == 200
    assert get(port, "/other")[0] == 404


def test_beat_serves_the_same_checks(
    database_url: str, prefix: str, tmp_path: Path
) -> None:
    port = free_port()
    with serving(BEAT, database_url, prefix, port, tmp_path / "beat.log"):
        wait_until(lambda: "venturi-beat" in get(port, "/healthz")[1], timeout=COMMAND_TIMEOUT)
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz")[0] == 200


def test_a_health_port_in_use_fails_the_worker_at_start_with_one_line(
    venturi_cli: Run,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = venturi_cli(*WORKER, "--health-port", str(port), "--health-host", "127.0.0.1")
    line = failed_with(done, 2)
    assert f"health port {port} on 127.0.0.1 is in use" in line


# -- the checks themselves ---------------------------------------------------------------------


def test_liveness_names_a_loop_stuck_in_a_step_and_recovers_when_it_moves_on() -> None:
    release = threading.Event()
    stuck = ServiceThread("venturi-test-stuck", lambda: float(release.wait(30)))
    stuck.start()
    try:
        _, reason = wait_until(
            lambda: (answer := liveness(stall_after=0.2)) and not answer[0] and answer,
            timeout=COMMAND_TIMEOUT,
        )
        assert "loop venturi-test-stuck has made no progress" in reason
        release.set()
        wait_until(lambda: liveness(stall_after=0.2)[0], timeout=COMMAND_TIMEOUT)
    finally:
        release.set()
        stuck.request_stop()
        stuck.join(deadline=time.monotonic() + COMMAND_TIMEOUT)
    assert "venturi-test-stuck" not in liveness()[1]  # asked to stop: no longer a loop


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_liveness_names_a_loop_whose_thread_ended_unasked() -> None:
    def die() -> float:
        raise SystemExit  # ends the thread: not an error the loop retries

    dead = ServiceThread("venturi-test-dead", die)
    dead.start()
    try:
        _, reason = wait_until(
            lambda: (answer := liveness()) and not answer[0] and answer, timeout=COMMAND_TIMEOUT
        )
        assert "loop venturi-test-dead has ended" in reason
    finally:
        dead.request_stop()
    assert liveness()[0]


def test_readiness_names_an_unmigrated_prefix(database_url: str) -> None:
    app = venturi.App(database_url, prefix="h_never_migrated", set_as_current=False)
    try:
        ok, reason = readiness(app.check_schema)
    finally:
        app.close()
    assert not ok
    assert "venturi migrate" in reason and "\n" not in reason
