-- The budgets the next waiting rows of webhook tasks draw on: of at most 100 unpaused webhook
-- tasks that draw on limits (tasks_webhook_limited_idx), the draws of each one's first 10
-- PENDING rows whose available_at has come, in claim order.
select w.limit_draws
from (
    select t.id
    from tasks t
    where t.dispatch_mode = 'webhook' and not t.paused
      and t.spec->'execution'->'limits' <> '[]'::jsonb
    limit 100
) t
cross join lateral (
    select q.limit_draws
    from task_instance q
    where q.task_id = t.id and q.status = 'PENDING' and q.available_at <= now()
    order by q.priority, q.available_at, q.scheduled_at, q.id
    limit 10
) w
where w.limit_draws is not null
