-- The budgets an agent's next waiting rows draw on: the draws of its first 100 PENDING rows
-- whose available_at has come, in claim order (rows without draws count toward the 100, so
-- the read stays bounded however large a backlog without limits is). $1 agent id.
select w.limit_draws
from (
    select q.limit_draws
    from task_instance q
    where q.status = 'PENDING' and q.agent_id = $1 and q.available_at <= now()
    order by q.priority, q.available_at, q.scheduled_at, q.id
    limit 100
) w
where w.limit_draws is not null
