-- Minute rollups from an instant on, oldest first.
-- $1 the first minute.
select minute, windows, succeeded, skipped, failed, dead, open, fire_lag_p50_ms,
    fire_lag_p99_ms, start_lag_p50_ms, start_lag_p99_ms
from console_minutes
where minute >= $1
order by minute
