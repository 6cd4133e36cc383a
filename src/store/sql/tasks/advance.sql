-- Move the trigger cursors of several tasks: each its next window, and its newest written
-- window when the pass wrote one.
-- $1 task ids, $2 next windows, $3 newest windows written (null: none).
update task_cursor c
set next_fire_at = m.next_fire_at,
    last_window_at = coalesce(m.last_window_at, c.last_window_at)
from unnest($1::text[], $2::timestamptz[], $3::timestamptz[])
    as m(id, next_fire_at, last_window_at)
where c.task_id = m.id
