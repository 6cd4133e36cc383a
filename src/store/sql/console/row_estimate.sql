-- The planner's estimate of the number of instance rows.
-- No parameters.
select reltuples::float8
from pg_class
where oid = 'task_instance'::regclass
