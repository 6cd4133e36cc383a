-- Lock RUNNING instances whose lease expired or whose run passed its deadline, the most
-- overdue first, skipping rows another transaction holds; with why each expired and whether
-- an outage (a restart, or one a replica recorded) came since its lease was last renewed.
-- $1 how many at most.
select /* fragment: running attempt columns */ i.id, i.task_id, i.window_key, i.agent_id,
    i.attempt, i.max_attempts, i.lease_token, i.worker_id,
    t.spec->'execution'->'retry_backoff' as retry_backoff, t.id is not null as task_exists,
    case when i.deadline_at < now() then 'timeout' else 'lease_expired' end as expiry,
    i.deadline_at >= now() and (
        pg_postmaster_start_time() > i.updated_at
        or exists (select 1 from db_unreachable u
                   where u.ended_at >= i.updated_at
                     and u.started_at <= i.lease_expires_at)) as lost_to_outage
from task_instance i
left join tasks t on t.id = i.task_id
where /* fragment: sources of fail */ i.status = 'RUNNING'
  and i.lease_expires_at is not null
  and least(i.lease_expires_at, i.deadline_at) < now()
order by least(i.lease_expires_at, i.deadline_at)
limit $1
for update of i skip locked
