-- An instance's rendered key on a limit (null: it does not draw on it; no row: no such
-- instance). $1 instance id, $2 limit name.
select (
    select d->>'key'
    from jsonb_array_elements(coalesce(limit_draws, '[]'::jsonb)) d
    where d->>'name' = $2
    limit 1
)
from task_instance
where id = $1
