-- Failed attempts, each a compare-and-swap on (id, RUNNING, lease token) to FAILED (available
-- after its delay) or DEAD, with their events (the claim that lived only on the row, then the
-- failure), and the failures added to the tasks' counts (task rows locked in id order).
-- $1 ids, $2 lease tokens, $3 states (FAILED or DEAD), $4 delays (ms), $5 errors, $6 error
-- kinds, $7 actor, $8 whether the holder reported them (a repeat under the token is answered
-- as the first was).
with f as (
    select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::text[],
                         $6::text[]) as f(id, token, to_status, delay_ms, error, kind)
), old as (
    select id, claimed_by from task_instance where id = any($1)
), upd as (
    update task_instance i
    set status = f.to_status, error = f.error,
        error_kind = f.kind,
        available_at = case when f.to_status = 'FAILED'
            then now() + f.delay_ms * interval '1 millisecond' else i.available_at end,
        finished_at = case when f.to_status = 'DEAD' then now() end,
        lease_token = null, lease_expires_at = null, deadline_at = null,
        claimed_by = null, updated_at = now(),
        reported_lease_token = case when $8 then f.token
            else i.reported_lease_token end
    from f, old
    where i.id = f.id
      and old.id = i.id
      and /* fragment: sources of fail */ (i.status || '') = 'RUNNING'
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
        select id, attempt, 'RUNNING', status, $7, error_kind || ': ' || left(error, 512),
            now(), 1
        from upd
    ) x
    order by instance_id, o
), tk as (
    update tasks t set consecutive_failures = t.consecutive_failures + c.n
    from (select task_id, count(*)::int as n from upd group by task_id) c
    where t.id = c.task_id
      and t.id in (
          select id from tasks
          where id in (select task_id from upd)
          order by id
          for no key update
      )
)
select /* fragment: instance columns */ id, task_id, agent_id, window_key, scheduled_at, status,
    source, attempt, max_attempts, available_at, lease_expires_at, worker_id, started_at,
    finished_at, result, error, error_kind, skip_reason, upstream_instance_id,
    upstream_result_digest, created_at, updated_at, priority, trace_parent, trace_state
from upd
