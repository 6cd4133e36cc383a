-- Pause a task (a paused task keeps the time it was paused at, its reason is replaced) and
-- cancel any scheduled resume; the task as it then is, with its cursor's next window.
-- $1 task id, $2 reason.
update tasks
set paused = true,
    paused_reason = $2,
    resume_at = null,
    paused_at = coalesce(paused_at, now()),
    version = version + 1,
    updated_at = now()
where id = $1
returning /* fragment: task columns */ spec, paused, paused_reason,
    (select c.next_fire_at from task_cursor c where c.task_id = tasks.id) as next_fire_at,
    consecutive_failures, version, created_at, updated_at
