-- The window of an upstream success, inserted for every unpaused task that runs after it
-- (unless it exists), the downstream task rows read for key share in id order.
-- $1 upstream task id, $2 window key, $3 scheduled at, $4 upstream instance id, $5 upstream
-- result digest, $6 the creating reason.
with d as (
    select id, agent_id, spec
    from tasks
    where upstream_task_id = $1 and not paused
    order by id
    for key share
), ins as (
    insert into task_instance (id, task_id, window_key, scheduled_at, status, source,
        agent_id, max_attempts, available_at, upstream_instance_id, upstream_result_digest,
        created_by, created_status, created_reason, limit_draws, priority)
    select gen_random_uuid(), d.id, $2, $3, 'PENDING', 'dependency', d.agent_id,
        coalesce((d.spec->'execution'->>'max_retries')::int, 3) + 1, now(), $4, $5,
        'dependency', 'PENDING', $6,
        kairos_render_limit_draws(d.spec->'execution'->'limits', d.id, d.agent_id,
            coalesce(d.spec->'context', '{}'::jsonb)),
        coalesce((d.spec->'execution'->>'priority')::smallint,
                 /* fragment: default priority */ 5)
    from d
    on conflict (task_id, window_key) do nothing
    returning id, task_id, agent_id
)
select id, task_id, agent_id
from ins
