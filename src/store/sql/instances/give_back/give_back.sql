-- Give back leases, each a compare-and-swap on (id, RUNNING, lease token): PENDING and
-- available at once with the same attempt, with their events (the claim that lived only on
-- the row, then the give-back).
-- $1 ids, $2 lease tokens, $3 actor, $4 reason.
with f as (
    select * from unnest($1::uuid[], $2::uuid[]) as f(id, token)
), old as (
    select id, claimed_by from task_instance where id = any($1)
), upd as (
    update task_instance i
    set status = 'PENDING', lease_token = null,
        lease_expires_at = null, deadline_at = null, claimed_by = null,
        available_at = least(i.available_at, now()), updated_at = now()
    from f, old
    where i.id = f.id
      and old.id = i.id
      and /* fragment: sources of give back */ (i.status || '') = 'RUNNING'
      and i.lease_token = f.token
    returning i.*, old.claimed_by as old_claimed_by
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
        select id, attempt, 'RUNNING', 'PENDING', $3, 'given back: ' || $4, now(), 1
        from upd
    ) x
    order by instance_id, o
)
select id, task_id, window_key, agent_id, attempt
from upd
