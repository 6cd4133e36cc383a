-- Replace a task's definition, its version up: paused, it keeps its pause's reason (or gets
-- one), time and scheduled resume; unpaused, they are cleared; resumed, its failures reset.
-- $1 id, $2 agent id, $3 spec, $4 trigger type, $5 upstream task id, $6 paused,
-- $7 dispatch mode, $8 resumed by definition, $9 trace parent, $10 trace state.
update tasks
set agent_id = $2,
    spec = $3,
    trigger_type = $4,
    upstream_task_id = $5,
    paused = $6,
    paused_reason = case when $6 then coalesce(paused_reason, 'paused by task definition') end,
    paused_at = case when $6 then coalesce(paused_at, now()) end,
    resume_at = case when $6 then resume_at end,
    consecutive_failures = case when $8 then 0 else consecutive_failures end,
    dispatch_mode = $7,
    version = version + 1,
    updated_at = now(),
    trace_parent = $9,
    trace_state = $10
where id = $1
