-- The trace contexts the tasks were defined under, for those that have one.
-- $1 task ids.
select id, trace_parent, trace_state
from tasks
where id = any($1)
  and trace_parent is not null
