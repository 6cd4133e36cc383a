-- Operator retries of a task's named windows in the given states (locked in id order): each
-- PENDING with one more attempt allowed, claimable now, for the task's current agent, with
-- its event.
-- $1 task id, $2 the states retried, $3 actor, $4 reason, $5 priority (null: the instance's
-- own), $6 window keys.
with old as (
    select id, status
    from task_instance
    where task_id = $1 and window_key = any($6) and status = any($2)
    order by id
    for update
), /* fragment: operator retry */ upd as (
    update task_instance i
    set status = 'PENDING', attempt = i.attempt + 1,
        max_attempts = i.max_attempts + 1, available_at = now(), finished_at = null,
        started_at = null, worker_id = null, lease_token = null,
        lease_expires_at = null, deadline_at = null, result = null, error = null,
        error_kind = null, skip_reason = null, updated_at = now(),
        priority = coalesce($5::smallint, i.priority),
        agent_id = coalesce((select t.agent_id from tasks t where t.id = i.task_id), i.agent_id),
        limit_draws = (select kairos_render_limit_draws(t.spec->'execution'->'limits',
                i.task_id, t.agent_id,
                coalesce(t.spec->'context', '{}'::jsonb) || coalesce(i.context_override, '{}'::jsonb))
            from tasks t where t.id = i.task_id)
    from old
    where i.id = old.id
    returning i.*, old.status as from_status
), ev as (
    insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason)
    select id, attempt, from_status, 'PENDING', $3, $4
    from upd
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state
from upd
