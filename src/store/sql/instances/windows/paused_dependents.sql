-- The paused tasks that run after a task.
-- $1 upstream task id.
select id
from tasks
where upstream_task_id = $1 and paused
