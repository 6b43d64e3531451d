"""venturi.contrib.otel in one process (ADR 0127): producer and consumer spans, the stored
trace headers, batches, async enqueue, failures, and the uninstrumented path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support import Database

import venturi
from venturi.contrib.otel import Instrumentation, instrument
from venturi.errors import Fail
from venturi.worker import Worker


@pytest.fixture
def provider() -> TracerProvider:
    return TracerProvider()


@pytest.fixture
def exporter(provider: TracerProvider) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def traced(app: venturi.App, provider: TracerProvider) -> Iterator[Instrumentation]:
    instrumentation = instrument(app, tracer_provider=provider)
    yield instrumentation
    instrumentation.uninstrument()


def headers_of(db: Database, job_id: str) -> object:
    [row] = db.all("SELECT headers FROM {{prefix}}_jobs WHERE id = %s", [job_id])
    return row["headers"]


def drain(app: venturi.App) -> None:
    worker = Worker(app)
    while worker.run_once():
        pass


def test_each_run_is_a_consumer_span_in_its_enqueues_trace(
    app: venturi.App, exporter: InMemorySpanExporter, traced: Instrumentation, db: Database
) -> None:
    seen: list[int] = []

    @app.task(kind="ot.flaky", backoff=0)
    def flaky(ctx: venturi.Context) -> None:
        seen.append(trace.get_current_span().get_span_context().span_id)
        if ctx.run_count == 1:
            raise ConnectionError("down")

    ref = flaky.delay()
    [producer] = exporter.get_finished_spans()
    context = producer.get_span_context()
    assert context is not None
    stored = headers_of(db, ref.id)
    assert isinstance(stored, dict)
    assert str(stored["traceparent"]).startswith(
        f"00-{context.trace_id:032x}-{context.span_id:016x}-"
    )
    drain(app)
    consumers = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert len(consumers) == 2
    assert {s.context.trace_id for s in consumers if s.context} == {context.trace_id}
    assert {s.parent.span_id for s in consumers if s.parent} == {context.span_id}
    # The handler runs inside its run's span.
    assert seen == [s.context.span_id for s in consumers if s.context]
    failed, completed = consumers
    assert failed.status.status_code is StatusCode.ERROR
    [event] = failed.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ConnectionError"
    assert event.attributes["exception.message"] == "ConnectionError: down"
    assert "ConnectionError: down" in str(event.attributes["exception.stacktrace"])
    assert failed.attributes is not None and completed.attributes is not None
    assert failed.attributes["venturi.job.outcome"] == "retried"
    assert completed.attributes["venturi.job.outcome"] == "completed"
    assert completed.status.status_code is StatusCode.UNSET


def test_a_batch_is_one_producer_span_and_every_job_carries_it(
    app: venturi.App, exporter: InMemorySpanExporter, traced: Instrumentation, db: Database
) -> None:
    @app.task(kind="ot.bulk")
    def bulk(n: int) -> None: ...

    refs = bulk.delay_many([[n] for n in range(3)], batch_size=2)
    pair, single = (s.attributes for s in exporter.get_finished_spans())
    assert pair is not None and single is not None
    assert pair["messaging.batch.message_count"] == 2
    assert single["messaging.message.id"] == refs[2].id  # a batch of one is one message
    parents = [headers_of(db, ref.id) for ref in refs]
    assert parents[0] == parents[1] != parents[2]
    big = bulk.delay_many([[n] for n in range(1200)])  # the COPY path
    assert headers_of(db, big[-1].id) == headers_of(db, big[0].id) is not None


def test_async_enqueue_and_a_dead_run_are_traced(
    app: venturi.App, exporter: InMemorySpanExporter, traced: Instrumentation, db: Database
) -> None:
    @app.task(kind="ot.fail")
    def fails() -> None:
        raise Fail("no way")

    async def enqueue() -> str:
        try:
            return (await fails.adelay()).id
        finally:
            await app.aclose()

    job_id = asyncio.run(enqueue())
    assert isinstance(headers_of(db, job_id), dict)
    drain(app)
    [producer, consumer] = exporter.get_finished_spans()
    assert producer.kind is SpanKind.PRODUCER and consumer.kind is SpanKind.CONSUMER
    assert consumer.status.status_code is StatusCode.ERROR
    assert consumer.attributes is not None
    assert consumer.attributes["venturi.job.outcome"] == "dead"


def test_uninstrumented_enqueues_store_no_headers_and_runs_make_no_span(
    app: venturi.App, exporter: InMemorySpanExporter, provider: TracerProvider, db: Database
) -> None:
    @app.task(kind="ot.plain")
    def plain() -> None: ...

    ref = plain.delay()
    assert headers_of(db, ref.id) is None
    assert not app.events.active
    instrumentation = instrument(app, tracer_provider=provider)
    drain(app)
    [consumer] = exporter.get_finished_spans()
    assert consumer.parent is None  # a root: its enqueue was not traced
    instrumentation.uninstrument()
    assert not app.events.active
