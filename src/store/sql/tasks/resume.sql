-- Resume a task by an operator: its circuit's failure count starts afresh.
-- $1 task id.
update tasks
set paused = false,
    paused_reason = null,
    paused_at = null,
    resume_at = null,
    consecutive_failures = 0,
    version = version + 1,
    updated_at = now()
where id = $1
