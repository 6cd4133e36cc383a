-- Delete terminal instances scheduled and finished more than the retention period ago, the
-- oldest first (skipping rows another transaction holds), with their events. Returns how many.
-- $1 retention days, $2 how many at most.
with gone as (
    delete from task_instance
    where id in (
        select id
        from task_instance
        where scheduled_at < now() - make_interval(days => $1)
          and finished_at < now() - make_interval(days => $1)
          and /* fragment: terminal states */ status in ('SUCCESS', 'DEAD', 'SKIPPED', 'CANCELLED')
        order by scheduled_at
        limit $2
        for update skip locked)
    returning id
), ev as (
    delete from instance_events where instance_id in (select id from gone)
)
select count(*)
from gone
