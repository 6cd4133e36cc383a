-- Claim the granted rows: each a compare-and-swap on (id, PENDING) to RUNNING under its permit,
-- for its taker (worker, lease, actor), with the task's context and dispatch, in claim order.
-- $1 ids, $2 permits, $3 takers, $4 lease seconds, $5 timeout seconds, $6 workers, $7 actors
-- (one per row), $8 the start time recorded (null: now; set when shared limits were checked).
with g as (
    select * from unnest($1::uuid[], $2::int[], $3::int[], $4::float8[], $5::float8[],
                         $6::text[], $7::text[]) as g(id, slot, taker, lease, timeout, worker, actor)
), upd as (
    update task_instance i
    set status = 'RUNNING', lease_token = gen_random_uuid(),
        lease_expires_at = clock_timestamp() + make_interval(secs => g.lease),
        deadline_at = clock_timestamp() + make_interval(secs => g.timeout),
        worker_id = g.worker, started_at = coalesce($8, now()), updated_at = now(),
        claimed_by = g.actor, run_slot = g.slot
    from g
    where i.id = g.id
      and /* fragment: sources of claim */ (i.status || '') = 'PENDING'
    returning i.*, g.taker, g.timeout
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state,
    taker, lease_token,
    t.context || coalesce(context_override, '{}'::jsonb) as context,
    t.dispatch,
    timeout::bigint as timeout_seconds
from upd
cross join lateral (
    select coalesce(t.spec->'context', '{}'::jsonb) as context, t.spec->'dispatch' as dispatch
    from tasks t
    where t.id = upd.task_id
    offset 0
) t
order by priority, available_at, scheduled_at, id
