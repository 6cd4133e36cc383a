-- Pause a task whose stored definition no longer parses.
-- $1 task id, $2 reason.
update tasks
set paused = true,
    paused_reason = $2,
    paused_at = now(),
    updated_at = now()
where id = $1
