"""A worker's App for the tracing tests, loaded with ``--app otel_app:app``.

The worker process instruments the App with a span processor that writes each
finished span as one JSON line to ``$OTEL_TEST_SPANS``, so the test reads the
consumer spans of another process (and the trace context it got from the
database, not from memory).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import orjson
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import venturi
from venturi.contrib.otel import instrument

app = venturi.App(prefix=os.environ.get("CLI_TEST_PREFIX", "cli_unset"))


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "ab") as out:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                record = {
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                    "status": span.status.status_code.name,
                    "events": [event.name for event in span.events],
                }
                out.write(orjson.dumps(record) + b"\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["OTEL_TEST_SPANS"])))
instrument(app, tracer_provider=provider)


@app.task(kind="otel.flaky", backoff=0)
def flaky(ctx: venturi.Context, n: int) -> int:
    if ctx.run_count == 1:
        raise ValueError("first run fails")
    return n
