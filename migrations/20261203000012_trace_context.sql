-- W3C trace context (docs/tracing.md): the `traceparent` and `tracestate` a task was defined
-- under (`PUT /v1/tasks/{id}`; its windows' spans link to it) and a window was created under (a
-- manual trigger's). A window created under no trigger context, every scheduled one among them,
-- is a trace of its own, named by its instance id, and stores nothing.
--
-- Nullable columns without a default: no table rewrite, and the previous release, which never
-- writes them, keeps working beside this one (its windows are simply traces of their own).
alter table tasks add column trace_parent text, add column trace_state text;
alter table task_instance add column trace_parent text, add column trace_state text;
