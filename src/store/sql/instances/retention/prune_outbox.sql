-- Delete outbox rows delivered or given up more than the retention period ago (skipping rows
-- another transaction holds).
-- $1 retention days, $2 how many at most.
delete from outbox
where id in (
    select id
    from outbox
    where coalesce(delivered_at, undeliverable_at) < now() - make_interval(days => $1)
    limit $2
    for update skip locked)
