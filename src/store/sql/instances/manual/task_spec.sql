-- A task's spec, and the clock.
-- $1 task id.
select spec, clock_timestamp()
from tasks
where id = $1
