"""Prometheus metrics scraped over HTTP (ADR 0127): ``venturi worker --metrics-port`` after a
known set of runs, and the standalone ``venturi metrics`` exporter's cached queue gauges."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from cli_support import HERE, cli_env
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support import wait_until

import venturi
from venturi.contrib.prometheus import QueueMetrics
from venturi.types import Status

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "venturi", *args],
            cwd=HERE,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def test_a_workers_metrics_count_its_runs(
    app: venturi.App, database_url: str, prefix: str, tmp_path: Path
) -> None:
    @app.task(kind="metrics.work")
    def work(n: int) -> int:
        return n

    refs = work.delay_many([[n] for n in (1, 2, 3, -1)])
    port = free_port()
    worker = start(
        ["worker", "--app", "metrics_app:app", "--metrics-port", str(port)],
        cli_env(database_url, prefix),
        tmp_path / "worker.log",
    )
    try:
        wait_until(lambda: all(app.job(r.id).job.status.is_terminal for r in refs), timeout=30)
        wait_until(lambda: answers(port), timeout=10)
        samples = scrape(port)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    kind = (("kind", "metrics.work"),)

    def runs(outcome: str) -> float:
        return samples[("venturi_runs_total", (("kind", "metrics.work"), ("outcome", outcome)))]

    assert runs("completed") == 3
    assert runs("retried") == 1  # -1 fails twice: retried, then dead at max_failures=2
    assert runs("dead") == 1
    assert samples[("venturi_run_duration_seconds_count", kind)] == 5
    assert samples[("venturi_run_duration_seconds_bucket", (*kind, ("le", "+Inf")))] == 5
    assert samples[("venturi_pickup_latency_seconds_count", kind)] == 4  # first runs only
    [in_flight] = [v for (name, _), v in samples.items() if name == "venturi_runs_in_flight"]
    assert in_flight == 0
    assert app.job(refs[3].id).job.status is Status.DEAD


def test_the_queue_gauges_read_stats_once_per_interval(
    app: venturi.App, database_url: str, prefix: str, tmp_path: Path
) -> None:
    @app.task(kind="metrics.work")
    def work(n: int) -> int:
        return n

    work.delay_many([[n] for n in range(3)])
    registry = CollectorRegistry()
    queue = QueueMetrics(app, min_interval=60, registry=registry)
    pending = registry.get_sample_value(
        "venturi_queue_jobs", {"kind": "metrics.work", "status": "pending"}
    )
    assert pending == 3
    work.delay(9)
    for _ in range(5):
        registry.collect()
    assert queue.queries == 1  # cached: still the first read
    assert (
        registry.get_sample_value(
            "venturi_queue_jobs", {"kind": "metrics.work", "status": "pending"}
        )
        == 3
    )
    age = registry.get_sample_value(
        "venturi_queue_oldest_eligible_age_seconds", {"kind": "metrics.work"}
    )
    assert age is not None and age >= 0

    port = free_port()
    exporter = start(
        ["metrics", "--app", "metrics_app:app", "--port", str(port), "--host", "127.0.0.1"],
        cli_env(database_url, prefix),
        tmp_path / "metrics.log",
    )
    try:
        wait_until(lambda: answers(port), timeout=15)
        samples = scrape(port)
    finally:
        exporter.send_signal(signal.SIGTERM)
        assert exporter.wait(timeout=30) == 0
    key = ("venturi_queue_jobs", (("kind", "metrics.work"), ("status", "pending")))
    assert samples[key] == 4


def test_without_the_extras_nothing_is_imported() -> None:
    code = (
        "import sys, venturi, venturi.worker, venturi.beat, venturi.cli, venturi.events\n"
        "app = venturi.App('postgresql://nowhere/x', set_as_current=False)\n"
        "venturi.worker.Worker(app)\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'prometheus_client')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
