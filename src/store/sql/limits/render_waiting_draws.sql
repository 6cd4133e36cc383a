-- Render the draws of a task's waiting (PENDING, FAILED) instances afresh, from the task's
-- limits and each instance's effective context. $1 task id.
update task_instance i
set limit_draws = kairos_render_limit_draws(
    t.spec->'execution'->'limits', i.task_id, i.agent_id,
    coalesce(t.spec->'context', '{}'::jsonb) || coalesce(i.context_override, '{}'::jsonb))
from tasks t
where t.id = $1
  and i.task_id = $1
  and i.status in ('PENDING', 'FAILED')
