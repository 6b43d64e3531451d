"""``manage.py venturi worker`` processes serving Django tasks (slow: real processes).

The SIGKILL case is the one django-tasks-db leaves RUNNING forever: here the
killed run's lease expires, another worker recovers the task and completes it.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from djtest_app import tasks, unimported

from venturi.contrib.django import compat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MANAGE = [sys.executable, "-m", "django", "venturi"]


@pytest.fixture
def start_worker(worker_env) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*options: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*MANAGE, "worker", "--concurrency", "2", *options],
            env=worker_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.1)


def finished(result) -> bool:
    result.refresh()
    return result.is_finished


def test_a_worker_process_runs_django_tasks_and_plain_tasks(queue, start_worker):
    django_task = tasks.calculate.enqueue(20, 22)
    plain = tasks.plain.delay(21)
    worker = start_worker()

    wait_for(lambda: finished(django_task))
    assert django_task.status == compat.TaskResultStatus.SUCCESSFUL
    assert django_task.return_value == 42
    assert django_task.worker_ids == [f"{worker_host()}:{worker.pid}"]
    assert plain.result(timeout=30) == 42


def worker_host() -> str:
    import socket

    return socket.gethostname()


def test_queues_limit_what_a_worker_serves(queue, start_worker):
    other = tasks.on_queue_2.enqueue()
    default = tasks.calculate.enqueue(1, 1)
    start_worker("--queues", "queue-2")

    wait_for(lambda: finished(other))
    assert other.return_value == "queue-2"
    time.sleep(1.0)
    default.refresh()
    assert default.status == compat.TaskResultStatus.READY


def test_a_failure_is_one_traceback_in_the_workers_log_the_tasks_frames_first(
    queue, start_worker
):
    result = tasks.fails.enqueue("boom")
    worker = start_worker("--queues", "default")
    wait_for(lambda: finished(result))
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    output = worker.stdout.read() if worker.stdout else ""

    assert output.count("Traceback (most recent call last):") == 1, output
    lines = output.splitlines()
    start = lines.index("Traceback (most recent call last):")
    assert lines[start - 1].endswith("path=djtest_app.tasks.fails state=FAILED")
    assert lines[start + 1].startswith(f'  File "{tasks.__file__}", line '), output
    assert lines[start + 1].endswith(", in fails")
    assert "ValueError: boom" in lines[start + 2 :][:4]
    assert f"djtest_app.tasks.fails {result.id} run 1 dead in " in output


def test_a_task_whose_module_no_worker_imported_waits_and_is_reported_unserved(
    queue, start_worker, worker_env
):
    stranded = unimported.never_served.enqueue()
    served = tasks.calculate.enqueue(1, 2)
    start_worker()
    wait_for(lambda: finished(served))
    time.sleep(1.0)

    stranded.refresh()
    assert stranded.status == compat.TaskResultStatus.READY
    assert queue.job(stranded.id).job.kind == "djtest_app.unimported.never_served"
    assert queue.unserved_kinds() == ["djtest_app.unimported.never_served"]
    stats = subprocess.run(
        [*MANAGE, "stats"], env=worker_env, capture_output=True, text=True, timeout=60, check=False
    )
    assert stats.returncode == 0, stats.stderr
    assert "djtest_app.unimported.never_served" in stats.stdout
    assert "no live worker serves these kinds" in stats.stderr
    assert "djtest_app.unimported.never_served" in stats.stderr


def test_a_sigkilled_workers_task_is_recovered_and_completes(queue, start_worker, tmp_path: Path):
    marker = tmp_path / "first-run"
    result = tasks.slow_first_run.enqueue(str(marker))
    doomed = start_worker()
    wait_for(marker.exists)
    result.refresh()
    assert result.status == compat.TaskResultStatus.RUNNING
    assert result.worker_ids == [f"{worker_host()}:{doomed.pid}"]

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    survivor = start_worker()

    wait_for(lambda: finished(result))
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == "recovered"
    assert result.worker_ids == [
        f"{worker_host()}:{doomed.pid}",
        f"{worker_host()}:{survivor.pid}",
    ]
    assert [e.exception_class_path for e in result.errors] == [compat_lost()]


def compat_lost() -> str:
    from venturi.contrib.django import WorkerLost

    return f"{WorkerLost.__module__}.{WorkerLost.__qualname__}"


def test_three_worker_processes_run_each_of_30_tasks_exactly_once(
    queue, start_worker, tmp_path: Path
):
    log = tmp_path / "runs"
    results = [tasks.record_run.enqueue(str(log), n) for n in range(30)]
    workers = [start_worker() for _ in range(3)]

    wait_for(lambda: all(finished(r) for r in results))
    assert all(r.status == compat.TaskResultStatus.SUCCESSFUL for r in results)
    lines = log.read_text().splitlines()
    counts = collections.Counter(int(line.split()[0]) for line in lines)
    assert counts == {n: 1 for n in range(30)}
    pids = {int(line.split()[1]) for line in lines}
    assert pids <= {w.pid for w in workers}


def test_a_worker_stops_gracefully_on_sigterm(queue, start_worker):
    worker = start_worker()
    result = tasks.calculate.enqueue(1, 2)
    wait_for(lambda: finished(result))
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    output = worker.stdout.read() if worker.stdout else ""
    assert "stopped" in output


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_worker_threads_in_the_web_server_start_at_its_first_request(queue, worker_env):
    import urllib.error
    import urllib.request

    port = free_port()
    env = {**worker_env, "VENTURI_DJANGO_WORKER_IN_SERVER": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        result = tasks.calculate.enqueue(2, 2)

        def answers() -> bool:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing-here", timeout=2)
            except urllib.error.HTTPError:
                return True
            except OSError:
                return False
            return True

        time.sleep(1.0)
        result.refresh()
        assert result.status == compat.TaskResultStatus.READY  # no request yet, no worker
        wait_for(answers)
        wait_for(lambda: finished(result))
        assert result.return_value == 4
        assert result.worker_ids == [f"{worker_host()}:{server.pid}"]
        assert [w.id for w in queue.workers()] == [f"{worker_host()}:{server.pid}"]
    finally:
        server.send_signal(signal.SIGTERM)
        status = server.wait(timeout=30)
    output = server.stdout.read() if server.stdout else ""
    assert status == 0, output
    assert queue.workers() == []  # stopped gracefully: it deregistered (ADR 0119)


def test_manage_py_venturi_beat_enqueues_the_projects_schedules(queue, worker_env):
    beat = subprocess.Popen(
        [*MANAGE, "beat"], env=worker_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: queue.count_jobs(kind="djtest.every_minute") > 0, timeout=90)
    finally:
        beat.send_signal(signal.SIGTERM)
        assert beat.wait(timeout=30) == 0


def test_manage_py_venturi_dashboard_serves_the_projects_queue(queue, worker_env):
    import urllib.request

    result = tasks.calculate.enqueue(3, 4)
    port = free_port()
    dashboard = subprocess.Popen(
        [*MANAGE, "dashboard", "--port", str(port), "--read-only"],
        env=worker_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pages: list[str] = []

    def page() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/{result.id}") as r:
                pages.append(r.read().decode())
        except OSError:
            return False
        return True

    try:
        wait_for(page, timeout=30)
    finally:
        dashboard.send_signal(signal.SIGTERM)
        assert dashboard.wait(timeout=30) == 0
    assert result.id in pages[0] and "<dd><code>djtest_app.tasks.calculate</code></dd>" in pages[0]
