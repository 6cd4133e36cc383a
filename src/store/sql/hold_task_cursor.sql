-- Share-lock a task's trigger cursor, waiting for a trigger pass that holds it.
-- $1 task id.
select 1
from task_cursor
where task_id = $1
for key share
