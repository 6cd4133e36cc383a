-- The unfinished windows an overlap decision needs, per task: the oldest, then the newest
-- ones, each side read as first rows of the task's PENDING, RUNNING and FAILED rows (one
-- probe per status, through that status's task-keyed index).
-- $1 task ids, $2 how many of the newest each (one per task).
select d.task_id, w.window_key, w.oldest
from unnest($1::text[], $2::bigint[]) as d(task_id, newest)
cross join lateral (
    select window_key, scheduled_at, true as oldest from (
        select * from (
            (select window_key, scheduled_at from task_instance
             where task_id = d.task_id and status = 'PENDING'
             order by scheduled_at asc, window_key asc limit 1)
            union all
            (select window_key, scheduled_at from task_instance
             where task_id = d.task_id and status = 'RUNNING'
             order by scheduled_at asc, window_key asc limit 1)
            union all
            (select window_key, scheduled_at from task_instance
             where task_id = d.task_id and status = 'FAILED'
             order by scheduled_at asc, window_key asc limit 1)
        ) u
        order by scheduled_at asc, window_key asc
        limit 1
    ) o
    union all
    select window_key, scheduled_at, false from (
        select * from (
            (select window_key, scheduled_at from task_instance
             where task_id = d.task_id and status = 'PENDING'
             order by scheduled_at desc, window_key desc limit d.newest)
            union all
            (select window_key, scheduled_at from task_instance
             where task_id = d.task_id and status = 'RUNNING'
             order by scheduled_at desc, window_key desc limit d.newest)
            union all
            (select window_key, scheduled_at from task_instance
             where task_id = d.task_id and status = 'FAILED'
             order by scheduled_at desc, window_key desc limit d.newest)
        ) u
        order by scheduled_at desc, window_key desc
        limit d.newest
    ) n
) w
order by d.task_id, w.oldest desc, w.scheduled_at, w.window_key
