-- Take up to $1 due deliveries, skipping those another notifier holds, and hold them for $2
-- seconds (their next attempt moves past the delivery's timeout), counting the attempt.
-- $1 most deliveries, $2 seconds to hold them.
update outbox o
set next_attempt_at = now() + make_interval(secs => $2),
    attempts = o.attempts + 1
where o.id in (
    select id
    from outbox
    where delivered_at is null and undeliverable_at is null and next_attempt_at <= now()
    order by next_attempt_at
    limit $1
    for update skip locked
)
returning o.id, o.event_id, o.kind, o.task_id, o.url, o.secret, o.payload, o.attempts,
    o.created_at
