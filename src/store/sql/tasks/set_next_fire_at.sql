-- Set a task's next window.
-- $1 task id, $2 next window (null: none).
update task_cursor
set next_fire_at = $2
where task_id = $1
