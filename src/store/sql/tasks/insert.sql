-- Register a new task (its insert creates its cursor row); nothing when the id is taken.
-- $1 id, $2 agent id, $3 spec, $4 trigger type, $5 upstream task id, $6 paused,
-- $7 paused reason, $8 dispatch mode, $9 trace parent, $10 trace state.
insert into tasks (id, agent_id, spec, trigger_type, upstream_task_id, paused,
    paused_reason, paused_at, dispatch_mode, trace_parent, trace_state)
values ($1, $2, $3, $4, $5, $6, $7, case when $6 then now() end, $8, $9, $10)
on conflict (id) do nothing
