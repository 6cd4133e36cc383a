-- Insert the instance of a debounce key, or move the key's waiting one (PENDING, never
-- claimed, not yet available). A new one is available (and scheduled) the debounce seconds
-- after the statement's clock; a waiting one moves to the clock at its update + the debounce
-- seconds, capped at its creation (the first trigger) + the longest wait, never earlier than
-- it was, and takes the trigger's context, its limit draws rendered again from the task's
-- context merged with it. A new one takes the trigger's trace context; a moved one keeps
-- its own. A row that no longer waits is locked, left alone, and not returned.
-- $1 new id, $2 window key, $3 debounce seconds, $4 max attempts, $5 context, $6 actor,
-- $7 priority, $8 debounce key, $9 task id, $10 longest wait in seconds (null: none),
-- $11 trace parent, $12 trace state.
insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id,
    attempt, max_attempts, available_at, context_override, created_by, created_status,
    created_reason, created_at, updated_at, limit_draws, priority, debounce_key,
    trace_parent, trace_state)
select $1, t.id, $2, c.now + make_interval(secs => $3), 'PENDING', 'manual', t.agent_id,
    1, $4, c.now + make_interval(secs => $3), $5, $6, 'PENDING', 'manual', c.now, c.now,
    kairos_render_limit_draws(t.spec->'execution'->'limits', t.id, t.agent_id,
        coalesce(t.spec->'context', '{}'::jsonb) || coalesce($5, '{}'::jsonb)),
    $7, $8, $11, $12
from tasks t
cross join (select clock_timestamp() as now) c
where t.id = $9
on conflict (task_id, debounce_key) where debounce_key is not null do update
set (available_at, scheduled_at) = (
        select at, at from (select greatest(task_instance.available_at,
            case when $10::float8 is null then m.moved
                 else least(m.moved, task_instance.created_at + make_interval(secs => $10))
            end) as at
        from (select clock_timestamp() + make_interval(secs => $3) as moved) m) a),
    context_override = excluded.context_override,
    limit_draws = kairos_render_limit_draws(
        (select s.spec->'execution'->'limits' from tasks s where s.id = task_instance.task_id),
        task_instance.task_id, task_instance.agent_id,
        coalesce((select s.spec->'context' from tasks s where s.id = task_instance.task_id),
                 '{}'::jsonb) || coalesce(excluded.context_override, '{}'::jsonb)),
    updated_at = now()
where task_instance.status = 'PENDING'
  and task_instance.started_at is null
  and task_instance.available_at > clock_timestamp()
returning id, id = $1 as inserted
