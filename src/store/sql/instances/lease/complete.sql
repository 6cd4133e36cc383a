-- Many completions, each a compare-and-swap on (id, RUNNING, lease token): the success, the
-- tasks' failure counts reset (locked in id order), the wake-ups of queued work (read before
-- the update), and whether the batch has dependents to trigger or receivers to notify.
-- $1 ids, $2 lease tokens, $3 results, $4 actors (null: the holder), $5 the work channel.
with f as (
    select * from unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::text[])
        as f(id, token, result, actor)
), upd as (
    update task_instance i
    set status = 'SUCCESS', result = f.result, finished_at = now(),
        lease_token = null, lease_expires_at = null, deadline_at = null,
        error = null, error_kind = null, updated_at = now(),
        finished_by = coalesce(f.actor, 'agent:' || coalesce(i.worker_id, 'unknown')),
        reported_lease_token = f.token
    from f
    where i.id = f.id
      and /* fragment: sources of complete */ (i.status || '') = 'RUNNING'
      and i.lease_token = f.token
    returning i.*, f.token as matched_token
), tk as (
    update tasks set consecutive_failures = 0
    where id in (
        select id from tasks
        where id in (select task_id from upd) and consecutive_failures <> 0
        order by id
        for no key update
    )
), info as (
    select bool_or(exists (select 1 from tasks d where d.upstream_task_id = t.id))
               as has_dependents,
           bool_or(jsonb_array_length(coalesce(t.spec->'notify'->'on_success', '[]')) > 0)
               as notifies,
           count(pg_notify($5, t.agent_id)) filter (
               where /* fragment: queued work */ ((select true from task_instance q
                   where q.task_id = t.id and q.status = 'PENDING' and (true)
                   order by q.priority, q.available_at, q.scheduled_at, q.id limit 1) is not null)
           ) as woken
    from tasks t
    where t.id in (select distinct task_id from upd)
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state,
    matched_token,
    coalesce(info.has_dependents, false) as has_dependents,
    coalesce(info.notifies, false) as notifies
from upd cross join info
