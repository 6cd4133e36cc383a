-- Throttled attempts, each a compare-and-swap on (id, RUNNING, lease token): PENDING,
-- available after its wait (or at the instant given: the end of the hold it made) with the
-- same attempt, error kind throttled, with their events (the claim that lived only on the row,
-- then the throttle).
-- $1 ids, $2 lease tokens, $3 seconds to wait, $4 errors, $5 actor, $6 instants (null: the wait).
with f as (
    select * from unnest($1::uuid[], $2::uuid[], $3::float8[], $4::text[], $6::timestamptz[])
        as f(id, token, secs, error, until)
), old as (
    select id, claimed_by from task_instance where id = any($1)
), upd as (
    update task_instance i
    set status = 'PENDING', lease_token = null,
        lease_expires_at = null, deadline_at = null, claimed_by = null,
        available_at = coalesce(f.until, now() + make_interval(secs => f.secs)),
        error = f.error, error_kind = 'throttled', reported_lease_token = f.token,
        updated_at = now()
    from f, old
    where i.id = f.id
      and old.id = i.id
      and /* fragment: sources of throttle */ (i.status || '') = 'RUNNING'
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
        select id, attempt, 'RUNNING', 'PENDING', $5,
            'throttled: ' || left(error, 512),
            now(), 1
        from upd
    ) x
    order by instance_id, o
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state
from upd
