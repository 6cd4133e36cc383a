-- The existing windows among a task's window keys, with their states.
-- $1 task id, $2 window keys.
select window_key, status
from task_instance
where task_id = $1
  and window_key = any($2)
