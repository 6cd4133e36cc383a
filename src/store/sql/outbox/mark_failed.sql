-- Record a failed try: retry after $3 seconds, or give up when the delivery is older than $4
-- seconds. Returns whether it was given up.
-- $1 outbox id, $2 error, $3 seconds until the next try, $4 most age in seconds.
update outbox
set last_error = $2,
    undeliverable_at = case when created_at < now() - make_interval(secs => $4) then now() end,
    next_attempt_at = now() + make_interval(secs => $3)
where id = $1
returning undeliverable_at is not null
