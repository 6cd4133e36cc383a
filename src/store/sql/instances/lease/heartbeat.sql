-- Extend many leases, each a compare-and-swap on (id, RUNNING, lease token).
-- $1 ids, $2 lease tokens, $3 lease seconds (one per lease).
with f as (
    select * from unnest($1::uuid[], $2::uuid[], $3::float8[]) as f(id, token, secs)
), upd as (
    update task_instance i
    set lease_expires_at = clock_timestamp() + make_interval(secs => f.secs),
        updated_at = now()
    from f
    where i.id = f.id
      and /* fragment: sources of complete */ (i.status || '') = 'RUNNING'
      and i.lease_token = f.token
    returning i.*, f.token as matched_token
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state,
    matched_token
from upd
