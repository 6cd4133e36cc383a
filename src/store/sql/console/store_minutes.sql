-- Re-sample the minute rollups of the windows scheduled in the last 10 minutes (those
-- minutes are still settling), replacing their previous samples.
-- No parameters.
insert into console_minutes (minute, windows, succeeded, skipped, failed, dead, open,
    fire_lag_p50_ms, fire_lag_p99_ms, start_lag_p50_ms, start_lag_p99_ms, sampled_at)
select date_trunc('minute', scheduled_at),
    count(*),
    count(*) filter (where status = 'SUCCESS'),
    count(*) filter (where status = 'SKIPPED'),
    count(*) filter (where status = 'FAILED'),
    count(*) filter (where status = 'DEAD'),
    count(*) filter (where status in ('PENDING', 'RUNNING')),
    percentile_cont(0.5) within group (order by fire_lag) filter (where source = 'schedule'),
    percentile_cont(0.99) within group (order by fire_lag) filter (where source = 'schedule'),
    percentile_cont(0.5) within group (order by start_lag),
    percentile_cont(0.99) within group (order by start_lag),
    now()
from (
    select scheduled_at, status, source,
        greatest(extract(epoch from (created_at - scheduled_at)), 0) * 1000 as fire_lag,
        extract(epoch from (started_at - available_at)) * 1000 as start_lag
    from task_instance
    where scheduled_at >= date_trunc('minute', now()) - interval '10 minutes'
      and scheduled_at < now()
) w
group by 1
on conflict (minute) do update
set windows = excluded.windows,
    succeeded = excluded.succeeded,
    skipped = excluded.skipped,
    failed = excluded.failed,
    dead = excluded.dead,
    open = excluded.open,
    fire_lag_p50_ms = excluded.fire_lag_p50_ms,
    fire_lag_p99_ms = excluded.fire_lag_p99_ms,
    start_lag_p50_ms = excluded.start_lag_p50_ms,
    start_lag_p99_ms = excluded.start_lag_p99_ms,
    sampled_at = excluded.sampled_at
