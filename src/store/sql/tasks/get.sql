-- A task with its cursor's next window.
-- $1 task id.
select /* fragment: task columns */ spec, paused, paused_reason,
    (select c.next_fire_at from task_cursor c where c.task_id = tasks.id) as next_fire_at,
    consecutive_failures, version, created_at, updated_at
from tasks
where id = $1
