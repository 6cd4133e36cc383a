-- Cancel a task's named windows where they are in a state a cancel moves from (locked
-- first), clearing their leases, with their events (the claim that lived only on the row,
-- then the cancel).
-- $1 the states they are cancelled from, $2 actor, $3 reason, $4 task id, $5 window keys.
with old as (
    select id, status, claimed_by
    from task_instance
    where task_id = $4 and window_key = any($5) and status = any($1)
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
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state
from upd
