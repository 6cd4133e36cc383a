-- Wake the trigger loops when a task's next window is due within the wake horizon.
-- $1 the tasks channel, $2 task id, $3 its next window, $4 the wake horizon in seconds.
select pg_notify($1, $2)
where $3 <= now() + make_interval(secs => $4)
