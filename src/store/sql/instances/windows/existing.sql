-- The windows that exist, per task, from its first due window key up to a last key.
-- $1 task ids, $2 first window keys (one per task), $3 the last window key.
select i.task_id, i.window_key
from unnest($1::text[], $2::text[]) as d(task_id, from_key)
join task_instance i
  on i.task_id = d.task_id
 and i.window_key >= d.from_key
 and i.window_key <= $3
