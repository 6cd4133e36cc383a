-- Renew expired leases lost to an outage, each by the length it had, from now, under the same
-- token: a compare-and-swap on (id, RUNNING, lease token).
-- $1 ids, $2 lease tokens.
update task_instance i
set lease_expires_at = clock_timestamp() + (i.lease_expires_at - i.updated_at),
    updated_at = now()
from unnest($1::uuid[], $2::uuid[]) as f(id, token)
where i.id = f.id
  and /* fragment: sources of complete */ (i.status || '') = 'RUNNING'
  and i.lease_token = f.token
