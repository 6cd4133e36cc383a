-- Resume a task whose circuit cooldown ended (half-open: its failure count is kept).
-- $1 task id.
update tasks
set paused = false,
    paused_reason = null,
    paused_at = null,
    resume_at = null,
    version = version + 1,
    updated_at = now()
where id = $1
