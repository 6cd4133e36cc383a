-- The ids of lease holders' calls whose row is RUNNING under the call's lease token.
-- $1 ids, $2 lease tokens.
select i.id
from unnest($1::uuid[], $2::uuid[]) as f(id, token)
join task_instance i
  on i.id = f.id
 and /* fragment: sources of complete */ (i.status || '') = 'RUNNING'
 and i.lease_token = f.token
