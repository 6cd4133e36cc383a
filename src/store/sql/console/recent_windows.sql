-- The newest windows of each of the tasks, newest first, read through the
-- (task_id, scheduled_at desc, id desc) index one task at a time.
-- $1 task ids, $2 windows per task.
select w.id, t.id as task_id, w.window_key, w.scheduled_at, w.status, w.attempt,
    w.max_attempts, w.start_lag_ms, w.skip_reason, w.error_kind
from unnest($1::text[]) as t(id)
cross join lateral (
    select i.id, i.window_key, i.scheduled_at, i.status, i.attempt, i.max_attempts,
        extract(epoch from (i.started_at - i.available_at))::float8 * 1000 as start_lag_ms,
        i.skip_reason, i.error_kind
    from task_instance i
    where i.task_id = t.id
    order by i.scheduled_at desc, i.id desc
    limit $2
) w
