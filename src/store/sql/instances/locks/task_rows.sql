-- Lock, in id order, the task rows a group commit's writes update: those whose failure counts
-- grow, and those with failures a success resets.
-- $1 the tasks of the batch, $2 the tasks of its failing instances.
select id
from tasks
where id = any($1)
  and (id = any($2) or consecutive_failures <> 0)
order by id
for no key update
