-- The exact count of instances in one status, read through that status's partial index.
-- $1 status.
select count(*)
from task_instance
where status = $1
