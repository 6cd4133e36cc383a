-- Pause the tasks that depend on a deleted task, saying why; their ids.
-- $1 the deleted task's id.
update tasks
set paused = true,
    paused_reason = 'upstream task ' || upstream_task_id || ' was deleted',
    paused_at = coalesce(paused_at, now()),
    resume_at = null,
    version = version + 1,
    updated_at = now()
where upstream_task_id = $1
returning id
