-- Exact instance counts per status (for a small table).
-- No parameters.
select status, count(*)
from task_instance
group by status
