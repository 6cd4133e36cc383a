-- W3C trace context of a window (docs/tracing.md): the `traceparent` and `tracestate` a manual
-- trigger was sent under. Nullable columns without a default: no table rewrite, and the previous
-- release, which never writes them, keeps working beside this one. Alone in its migration (see
-- 20261203000012_trace_context.sql).
alter table task_instance add column trace_parent text, add column trace_state text;
