-- Cancel a batch of a task's instances in the given states, in id order after the last id
-- of the batch before, clearing their leases, with their events (the claim that lived only
-- on the row, then the cancel). Returns how many, and the last id.
-- $1 the states they are cancelled from, $2 actor, $3 reason, $4 task id, $5 the last id of
-- the batch before (null: the first batch), $6 the batch size.
with old as (
    select id, status, claimed_by
    from task_instance
    where task_id = $4 and status = any($1) and ($5::uuid is null or id > $5)
    order by id
    limit $6
    for update
), upd as (
    update task_instance i
    set status = 'CANCELLED', finished_at = now(),
        lease_token = null, lease_expires_at = null, deadline_at = null,
        claimed_by = null, error_kind = 'cancelled', error = $3, updated_at = now()
    from old
    where i.id = old.id
    returning i.*, old.status as from_status, old.claimed_by as old_claimed_by
), ev as (
    /* fragment: close attempt events */ insert into instance_events
        (instance_id, attempt, from_status, to_status, actor, reason, at)
    select instance_id, attempt, from_status, to_status, actor, reason, at from (
        select id as instance_id, attempt, 'PENDING' as from_status, 'RUNNING' as to_status,
            old_claimed_by as actor, 'claimed by worker ' || coalesce(worker_id, 'unknown')
                as reason, started_at as at, 0 as o
        from upd
        where old_claimed_by is not null
        union all
        select id, attempt, from_status, 'CANCELLED', $2, $3, now(), 1
        from upd
    ) x
    order by instance_id, o
)
select count(*), (select u.id from upd u order by u.id desc limit 1)
from upd
