-- Lock the RUNNING rows of lease holders' calls by (id, lease token), in id order, waiting
-- for rows another transaction holds.
-- $1 ids, $2 lease tokens.
select i.id, i.task_id
from unnest($1::uuid[], $2::uuid[]) as f(id, token)
join task_instance i
  on i.id = f.id
 and /* fragment: sources of complete */ (i.status || '') = 'RUNNING'
 and i.lease_token = f.token
order by i.id
for update of i
