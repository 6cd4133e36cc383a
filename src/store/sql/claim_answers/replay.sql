-- The instances a recorded, unexpired claim took that it still holds (RUNNING under the same
-- lease tokens), with what the claim answered for each, in the order the claim took them.
-- $1 agent id, $2 worker id, $3 claim_id.
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state,
    lease_token, context, dispatch, timeout_seconds
from (
    select i.*, t.context || coalesce(i.context_override, '{}'::jsonb) as context,
        t.dispatch,
        extract(epoch from i.deadline_at - i.started_at)::bigint as timeout_seconds,
        f.n
    from claim_answers a
    cross join lateral unnest(a.instance_ids, a.lease_tokens)
        with ordinality as f(id, token, n)
    join task_instance i
      on i.id = f.id
     and i.lease_token = f.token
     and (i.status || '') = 'RUNNING'
    cross join lateral (
        select coalesce(t.spec->'context', '{}'::jsonb) as context,
            t.spec->'dispatch' as dispatch
        from tasks t
        where t.id = i.task_id
    ) t
    where a.agent_id = $1 and a.worker_id = $2 and a.claim_id = $3
      and a.expires_at > now()
) x
order by n
