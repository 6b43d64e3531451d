-- Trace context (ADR 0127), appended after the seed's columns (SPEC 5.1): the
-- W3C trace headers (`traceparent`, `tracestate`) of the enqueue that made the
-- job, written only when the App is instrumented (venturi.contrib.otel) and read
-- back with each claim, so a run's span joins its enqueue's trace. Nullable
-- without a default, so adding it rewrites no row and the uninstrumented
-- statements are unaffected.
ALTER TABLE {{prefix}}_jobs ADD COLUMN headers jsonb;
