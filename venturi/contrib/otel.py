"""OpenTelemetry traces from enqueue to run (SPEC 5.6, ADR 0127); needs ``venturi[otel]``.

``instrument(app)`` makes a PRODUCER span around each enqueue (one per
``delay``/``apply_async`` call, one per batch of ``delay_many``) and a
CONSUMER span around each run, in the same trace: the producer span's W3C
``traceparent`` (and ``tracestate``) is stored with the job (its ``headers``
column, V7) and a worker's claim reads it back, so the trace travels through
the database, across processes and retries (one consumer span per run, each a
child of the enqueue's span). Spans a handler makes are children of its run's.

Attributes follow the messaging semantic conventions where they fit:
``messaging.system`` = ``venturi``, ``messaging.operation.name`` /
``.type`` (``send``, ``process``), ``messaging.destination.name`` = the job
kind, ``messaging.message.id`` = the job id, ``messaging.batch.message_count``
for a batch, ``messaging.client.id`` = the worker id; venturi's own are
``venturi.job.run``, ``venturi.job.outcome`` and ``venturi.job.merged``. A
failed run (retried or dead from a failure) gets status ERROR and an
``exception`` event with the type, message (the journal note) and stored
traceback text; a cancelled run is dead without being an error.

Only this module imports ``opentelemetry``; ``import venturi`` never does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from venturi import App
from venturi.events import ClaimedJob, Event, JobMerged, NewJob, RunEnded, Subscription

__all__ = ["Instrumentation", "instrument"]

SYSTEM = "venturi"
_propagator = TraceContextTextMapPropagator()


class _Tracer:
    """The ``venturi.events.Tracer`` this module installs on an App."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def enqueue(self, jobs: Sequence[NewJob]) -> Iterator[Sequence[NewJob]]:
        kinds = sorted({job.kind for job in jobs})
        destination = kinds[0] if len(kinds) == 1 else "(several kinds)"
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": destination,
        }
        if len(jobs) == 1:
            attributes["messaging.message.id"] = jobs[0].id
        else:
            attributes["messaging.batch.message_count"] = len(jobs)
        with self._tracer.start_as_current_span(
            f"send {destination}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            headers: dict[str, str] = {}
            _propagator.inject(headers)
            yield [replace(job, headers={**(job.headers or {}), **headers}) for job in jobs]

    @contextmanager
    def run(self, job: ClaimedJob, worker_id: str) -> Iterator[None]:
        parent = _propagator.extract(dict(job.headers)) if job.headers else None
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.kind,
            "messaging.message.id": job.claim.job_id,
            "messaging.client.id": worker_id,
            "venturi.job.run": job.claim.run_count,
        }
        with self._tracer.start_as_current_span(
            f"process {job.kind}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ):
            yield


def _annotate(event: Event) -> None:
    """Outcomes and merges, on the span that is current where the event is emitted."""
    span = trace.get_current_span()
    if isinstance(event, JobMerged):
        span.set_attribute("venturi.job.merged", True)
        span.set_attribute("messaging.message.id", event.job_id)
        return
    if not isinstance(event, RunEnded):
        return
    span.set_attribute("venturi.job.outcome", event.outcome.value)
    if not event.is_failure:
        return
    message = event.note or event.outcome.value
    exception_type = _exception_type(event.traceback) or message.partition(":")[0]
    span.add_event(
        "exception",
        {
            "exception.type": exception_type,
            "exception.message": message,
            "exception.stacktrace": event.traceback or "",
        },
    )
    span.set_status(Status(StatusCode.ERROR, message))
    span.set_attribute("error.type", exception_type)


def _exception_type(traceback: str | None) -> str | None:
    """The raised type's name from a stored traceback text (its last line)."""
    if not traceback:
        return None
    last = traceback.rstrip().rpartition("\n")[2]
    return last.partition(":")[0].strip() or None


class Instrumentation:
    """What ``instrument`` installed; ``uninstrument()`` takes it away again."""

    def __init__(self, app: App, subscription: Subscription) -> None:
        self._app = app
        self._subscription = subscription

    def uninstrument(self) -> None:
        self._subscription.unsubscribe()
        self._app.events.tracer = None


def instrument(app: App, *, tracer_provider: trace.TracerProvider | None = None) -> Instrumentation:
    """Trace ``app``'s enqueues and runs with ``tracer_provider`` (default: the global one).

    Instrument both sides, the enqueuing process and the worker's, for one trace.
    """
    tracer = trace.get_tracer("venturi", tracer_provider=tracer_provider)
    app.events.tracer = _Tracer(tracer)
    subscription = app.events.subscribe(_annotate, types=(JobMerged, RunEnded))
    return Instrumentation(app, subscription)
