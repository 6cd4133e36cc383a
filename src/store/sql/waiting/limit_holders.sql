-- The first five RUNNING instances (by id) holding units of one limit's key.
-- $1 limit name, $2 key.
select id
from task_instance
where status = 'RUNNING'
  and held_units @> jsonb_build_array(jsonb_build_object('name', $1::text, 'key', $2::text))
order by id
limit 5
