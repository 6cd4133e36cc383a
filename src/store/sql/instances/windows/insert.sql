-- Insert windows, each unless its (task, window key) exists, with how it was created on the
-- row; a PENDING one gets its limit draws, and the task's priority unless it has its own.
-- $1 ids, $2 task ids, $3 window keys, $4 scheduled instants, $5 statuses, $6 sources,
-- $7 agent ids, $8 max attempts, $9 available instants, $10 skip reasons, $11 context
-- overrides, $12 actor, $13 created at (null: the transaction's start), $14 priorities (null:
-- the task's), $15 trace parents, $16 trace states.
with ins as (
    insert into task_instance (id, task_id, window_key, scheduled_at, status, source,
        agent_id, attempt, max_attempts, available_at, skip_reason, finished_at,
        context_override, created_by, created_status, created_reason, created_at,
        updated_at, limit_draws, priority, trace_parent, trace_state)
    select id, task_id, window_key, scheduled_at, status, source, agent_id, 1,
        max_attempts, available_at, skip_reason,
        case when status = 'SKIPPED' then created end, context_override,
        $12, status, coalesce(skip_reason, source), created, created,
        case when status = 'PENDING' then (
            select kairos_render_limit_draws(t.spec->'execution'->'limits', r.task_id,
                r.agent_id, coalesce(t.spec->'context', '{}'::jsonb)
                    || coalesce(r.context_override, '{}'::jsonb))
            from tasks t
            where t.id = r.task_id
              and jsonb_array_length(coalesce(t.spec->'execution'->'limits', '[]'::jsonb)) > 0)
        end,
        coalesce(r.priority, (select (t.spec->'execution'->>'priority')::smallint
                              from tasks t where t.id = r.task_id),
                 /* fragment: default priority */ 5),
        r.trace_parent, r.trace_state
    from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[],
                $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::text[],
                $11::jsonb[], $14::smallint[], $15::text[], $16::text[])
        as r(id, task_id, window_key, scheduled_at, status, source, agent_id,
             max_attempts, available_at, skip_reason, context_override, priority,
             trace_parent, trace_state)
    cross join (select case when $13::timestamptz is null then now()
                            else greatest($13, clock_timestamp()) end as created) c
    on conflict (task_id, window_key) do nothing
    returning id, task_id, window_key, status, trace_parent, trace_state
)
select id, task_id, window_key, status, trace_parent, trace_state
from ins
