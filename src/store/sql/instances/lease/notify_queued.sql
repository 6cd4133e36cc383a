-- Wake the agents of the tasks among $2 whose finishing RUNNING rows may unblock queued work
-- (read before the rows change). $1 the work channel, $2 task ids.
select pg_notify($1, t.agent_id)
from tasks t
where t.id = any($2)
  and /* fragment: queued work */ ((select true from task_instance q
      where q.task_id = t.id and q.status = 'PENDING' and (true)
      order by q.priority, q.available_at, q.scheduled_at, q.id limit 1) is not null)
