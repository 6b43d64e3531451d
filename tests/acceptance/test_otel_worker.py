"""One trace from enqueue to run across a real ``venturi worker`` process (ADR 0127): the
trace context travels through the database's ``headers`` column."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_support import HERE, cli_env
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from support import wait_until

import venturi
from venturi.contrib.otel import instrument
from venturi.types import Status

pytestmark = pytest.mark.slow


def test_a_retried_jobs_runs_in_a_worker_process_join_its_enqueue_trace(
    app: venturi.App, database_url: str, prefix: str, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(app, tracer_provider=provider)

    @app.task(kind="otel.flaky")
    def flaky(n: int) -> int:
        return n

    ref = flaky.delay(3)
    [producer] = exporter.get_finished_spans()
    assert producer.kind is SpanKind.PRODUCER
    assert producer.name == "send otel.flaky"
    assert producer.attributes is not None
    assert producer.attributes["messaging.message.id"] == ref.id

    spans_file = tmp_path / "spans.jsonl"
    env = {**cli_env(database_url, prefix), "OTEL_TEST_SPANS": str(spans_file)}
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "venturi", "worker", "--app", "otel_app:app"],
            cwd=HERE,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: app.job(ref.id).job.status is Status.COMPLETED, timeout=30)
        wait_until(lambda: spans_file.exists() and len(_spans(spans_file)) >= 2, timeout=10)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    consumers = _spans(spans_file)
    context = producer.get_span_context()
    assert context is not None
    assert [s["kind"] for s in consumers] == ["CONSUMER", "CONSUMER"], log.read_text()
    assert {s["trace_id"] for s in consumers} == {f"{context.trace_id:032x}"}
    assert {s["parent_id"] for s in consumers} == {f"{context.span_id:016x}"}
    first, second = consumers
    assert first["attributes"]["venturi.job.run"] == 1
    assert first["attributes"]["venturi.job.outcome"] == "retried"
    assert first["status"] == "ERROR" and first["events"] == ["exception"]
    assert second["attributes"]["venturi.job.run"] == 2
    assert second["attributes"]["venturi.job.outcome"] == "completed"
    assert second["status"] == "UNSET"
    for span in consumers:
        assert span["name"] == "process otel.flaky"
        assert span["attributes"]["messaging.system"] == "venturi"
        assert span["attributes"]["messaging.message.id"] == ref.id
        assert span["attributes"]["messaging.destination.name"] == "otel.flaky"


def _spans(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]
