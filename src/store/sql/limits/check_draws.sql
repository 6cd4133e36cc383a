-- The limits a task's draws name, locked for share until the task is written (none is
-- deleted or changed meanwhile). $1 limit names.
select name, spec
from limits
where name = any($1)
order by name
for share
