-- Lock the RUNNING attempts that failure reports name by (id, lease token), in id order.
-- $1 ids, $2 lease tokens.
select /* fragment: running attempt columns */ i.id, i.task_id, i.window_key, i.agent_id,
    i.attempt, i.max_attempts, i.lease_token, i.worker_id,
    t.spec->'execution'->'retry_backoff' as retry_backoff, t.id is not null as task_exists,
    null::text as expiry, false as lost_to_outage
from unnest($1::uuid[], $2::uuid[]) as f(id, token)
join task_instance i
  on i.id = f.id
 and /* fragment: sources of fail */ (i.status || '') = 'RUNNING'
 and i.lease_token = f.token
left join tasks t on t.id = i.task_id
order by i.id
for update of i
